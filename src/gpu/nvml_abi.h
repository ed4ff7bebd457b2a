/* NVML's C ABI as stoker declares it, so that nothing needs nvml.h to
 * build: the handles, structs and constants stoker passes to and reads from
 * libnvidia-ml, and the entry points it looks up with dlsym (NV_FUNCS).
 * src/gpu/nvml.c calls them, tests/tools/fakenvml implements them, and
 * tests/tools/check-headers.c compares every line here with the toolkit's
 * nvml.h where one is installed (`make check-headers`; `make` runs it too),
 * so that a wrong type fails the build instead of corrupting memory on a
 * GPU machine. A new entry point, struct or constant is one line in its
 * list below and is checked from then on. Internal to src/gpu and the
 * fake; no stoker header exposes it. */
#ifndef STOKER_GPU_NVML_ABI_H
#define STOKER_GPU_NVML_ABI_H

/* nvmlReturn_t and the other NVML enums stoker passes (sensor, clock and
 * policy selectors) have no negative value, so GCC and clang give them the
 * type unsigned int: declared so, an entry point's type here is exactly
 * nvml.h's, which the check compares with __builtin_types_compatible_p. */
typedef unsigned nv_ret;

/* Handles: NVML's own struct tags, incomplete (only the fake defines
 * them), so that they are the same types as nvmlDevice_t and the rest. */
typedef struct nvmlDevice_st *nv_dev;
typedef struct nvmlEventSet_st *nv_evset;
typedef struct nvmlGpmSample_st *nv_gpm_sample;

/* Constants: stoker's name, nvml.h's name, value. The check asserts that
 * each equals nvml.h's. */
#define NV_CONSTS(C)                                                   \
  C(NV_SUCCESS, NVML_SUCCESS, 0)                                       \
  C(NV_ERROR_INVALID_ARGUMENT, NVML_ERROR_INVALID_ARGUMENT, 2)         \
  C(NV_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_SUPPORTED, 3)               \
  C(NV_ERROR_NO_PERMISSION, NVML_ERROR_NO_PERMISSION, 4)               \
  C(NV_ERROR_NOT_FOUND, NVML_ERROR_NOT_FOUND, 6)                       \
  C(NV_ERROR_INSUFFICIENT_SIZE, NVML_ERROR_INSUFFICIENT_SIZE, 7)       \
  C(NV_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_DRIVER_NOT_LOADED, 9)       \
  C(NV_ERROR_TIMEOUT, NVML_ERROR_TIMEOUT, 10)                          \
  C(NV_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_FUNCTION_NOT_FOUND, 13)    \
  C(NV_ERROR_GPU_IS_LOST, NVML_ERROR_GPU_IS_LOST, 15)                  \
  C(NV_ERROR_UNKNOWN, NVML_ERROR_UNKNOWN, 999)                         \
  C(NV_EVENT_XID, nvmlEventTypeXidCriticalError, 0x8)                  \
  C(NV_TEMPERATURE_GPU, NVML_TEMPERATURE_GPU, 0)                       \
  C(NV_CLOCK_SM, NVML_CLOCK_SM, 1)                                     \
  C(NV_CLOCK_MEM, NVML_CLOCK_MEM, 2)                                   \
  C(NV_PERF_POLICY_POWER, NVML_PERF_POLICY_POWER, 0)                   \
  C(NV_PERF_POLICY_THERMAL, NVML_PERF_POLICY_THERMAL, 1)               \
  C(NV_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE, 1)                   \
  C(NV_GPM_METRIC_GRAPHICS_UTIL, NVML_GPM_METRIC_GRAPHICS_UTIL, 1)     \
  C(NV_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_UTIL, 2)                 \
  C(NV_GPM_METRIC_ANY_TENSOR_UTIL, NVML_GPM_METRIC_ANY_TENSOR_UTIL, 5) \
  C(NV_GPM_METRIC_DRAM_BW_UTIL, NVML_GPM_METRIC_DRAM_BW_UTIL, 10)      \
  C(NV_GPM_METRIC_PCIE_TX_PER_SEC, NVML_GPM_METRIC_PCIE_TX_PER_SEC, 20) \
  C(NV_GPM_METRIC_PCIE_RX_PER_SEC, NVML_GPM_METRIC_PCIE_RX_PER_SEC, 21) \
  C(NV_GPM_METRICS_GET_VERSION, NVML_GPM_METRICS_GET_VERSION, 1)       \
  C(NV_GPM_SUPPORT_VERSION, NVML_GPM_SUPPORT_VERSION, 1)              \
  C(NV_MEMORY_V2, nvmlMemory_v2, 0x2000028)                             \
  C(NV_MEMORY_ERROR_CORRECTED, NVML_MEMORY_ERROR_TYPE_CORRECTED, 0)     \
  C(NV_MEMORY_ERROR_UNCORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 1) \
  C(NV_VOLATILE_ECC, NVML_VOLATILE_ECC, 0)                              \
  C(NV_AGGREGATE_ECC, NVML_AGGREGATE_ECC, 1)                            \
  C(NV_RETIRE_SBE, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, 0) \
  C(NV_RETIRE_DBE, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, 1)  \
  C(NV_FEATURE_ENABLED, NVML_FEATURE_ENABLED, 1)                        \
  C(NV_NVLINK_MAX_LINKS, NVML_NVLINK_MAX_LINKS, 18)                     \
  C(NV_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_REPLAY, 0)          \
  C(NV_NVLINK_ERROR_DL_RECOVERY, NVML_NVLINK_ERROR_DL_RECOVERY, 1)      \
  C(NV_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_FLIT, 2)      \
  C(NV_NVLINK_ERROR_DL_CRC_DATA, NVML_NVLINK_ERROR_DL_CRC_DATA, 3)      \
  C(NV_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_MEMORY_TEMP, 82)                 \
  C(NV_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 138) \
  C(NV_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 139) \
  C(NV_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_DOUBLE, 0)                    \
  C(NV_VALUE_TYPE_UNSIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_INT, 1)        \
  C(NV_VALUE_TYPE_UNSIGNED_LONG, NVML_VALUE_TYPE_UNSIGNED_LONG, 2)      \
  C(NV_VALUE_TYPE_UNSIGNED_LONG_LONG, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 3) \
  C(NV_VALUE_TYPE_SIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_LONG_LONG, 4) \
  C(NV_VALUE_TYPE_SIGNED_INT, NVML_VALUE_TYPE_SIGNED_INT, 5)            \
  C(NV_VALUE_TYPE_UNSIGNED_SHORT, NVML_VALUE_TYPE_UNSIGNED_SHORT, 6)    \
  C(NV_GRID_LICENSE_FEATURE_CODE_VGPU, NVML_GRID_LICENSE_FEATURE_CODE_VGPU, 1) \
  C(NV_GRID_LICENSE_FEATURE_MAX_COUNT, NVML_GRID_LICENSE_FEATURE_MAX_COUNT, 3) \
  C(NV_GRID_LICENSE_BUFFER_SIZE, NVML_GRID_LICENSE_BUFFER_SIZE, 128)

enum {
#define C(ours, theirs, value) ours = value,
  NV_CONSTS(C)
#undef C
};
/* The length of nv_gpm_get's array: nvml.h's NVML_GPM_METRIC_MAX or more
 * (the check asserts so; see nv_gpm_get). */
enum { NV_GPM_METRIC_MAX = 210 };
/* NVML_VALUE_NOT_AVAILABLE, (-1), as the unsigned long long fields hold it. */
#define NV_VALUE_NOT_AVAILABLE_ULL (~0ull)

/* The structs, each mirroring the nvml.h type beside it in NV_STRUCTS. */
struct nv_pci { /* nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it */
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct nv_util {
  unsigned gpu, memory;
};
struct nv_memory { /* nvmlMemory_t (v1): used includes reserved */
  unsigned long long total, free, used;
};
/* nvmlMemory_v2_t: version is NV_MEMORY_V2 (sizeof | 2 << 24); used
 * excludes the driver's and firmware's reserved memory, as DCGM's FB_USED. */
struct nv_memory_v2 {
  unsigned version;
  unsigned long long total, reserved, free, used;
};
struct nv_proc { /* nvmlProcessInfo_t (v2, as the _v3 call fills it) */
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};
struct nv_proc_util {
  unsigned pid;
  unsigned long long ts;
  unsigned sm, mem, enc, dec;
};
struct nv_violation {
  unsigned long long ref_time, violation_ns;
};
struct nv_event {
  nv_dev dev;
  unsigned long long type, data;
  unsigned gi, ci;
};
struct nv_gpm_metric {
  unsigned id;
  nv_ret ret;
  double value;
  struct {
    char *short_name, *long_name, *unit;
  } info;
};
/* NVML reads and writes the first `num` metrics only (programs built with
 * an older nvml.h, whose array was shorter, pass the same version 1), so
 * an array at least as long as nvml.h's is safe with every driver. */
struct nv_gpm_get {
  unsigned version, num;
  nv_gpm_sample s1, s2;
  struct nv_gpm_metric metrics[NV_GPM_METRIC_MAX];
};
struct nv_gpm_support {
  unsigned version, supported;
};
/* nvmlValue_t (a union; its members are checked one by one) and
 * nvmlFieldValue_t, for nvmlDeviceGetFieldValues: field_id in, the rest
 * out; value is valid only where ret is NV_SUCCESS, of type value_type. */
union nv_value {
  double d;
  int si;
  unsigned ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  unsigned short us;
};
struct nv_field_value {
  unsigned field_id, scope_id;
  long long timestamp, latency_us;
  unsigned value_type;
  nv_ret ret;
  union nv_value value;
};

/* nvmlGridLicensableFeatures_t and its parts, for
 * nvmlDeviceGetGridLicensableFeatures_v4 (DCGM's VGPU_LICENSE_STATUS). */
struct nv_grid_expiry {
  unsigned year;
  unsigned short month, day, hour, min, sec;
  unsigned char status;
};
struct nv_grid_feature {
  unsigned code;  /* nvmlGridLicenseFeatureCode_t */
  unsigned state; /* non-zero: licensed now */
  char license_info[NV_GRID_LICENSE_BUFFER_SIZE];
  char product_name[NV_GRID_LICENSE_BUFFER_SIZE];
  unsigned enabled;
  struct nv_grid_expiry expiry;
};
struct nv_grid_features {
  int supported; /* non-zero: vGPU software licensing applies */
  unsigned count;
  struct nv_grid_feature features[NV_GRID_LICENSE_FEATURE_MAX_COUNT];
};

/* Stoker's struct, nvml.h's type, and whether stoker's may be larger (1:
 * only nv_gpm_get, as its array; the others must be the same size, arrays
 * of them having nvml.h's stride). The entry points below take them as
 * NAME_t: stoker's struct in the build, nvml.h's in the check (which
 * defines STK_NV_ABI_CHECK after including nvml.h), where each pair's
 * size and fields are compared instead. */
#define NV_STRUCTS(S)                                \
  S(nv_pci, nvmlPciInfo_t, 0)                        \
  S(nv_util, nvmlUtilization_t, 0)                   \
  S(nv_memory, nvmlMemory_t, 0)                      \
  S(nv_memory_v2, nvmlMemory_v2_t, 0)                \
  S(nv_proc, nvmlProcessInfo_t, 0)                   \
  S(nv_proc_util, nvmlProcessUtilizationSample_t, 0) \
  S(nv_violation, nvmlViolationTime_t, 0)            \
  S(nv_event, nvmlEventData_t, 0)                    \
  S(nv_gpm_metric, nvmlGpmMetric_t, 0)               \
  S(nv_gpm_get, nvmlGpmMetricsGet_t, 1)              \
  S(nv_gpm_support, nvmlGpmSupport_t, 0)             \
  S(nv_field_value, nvmlFieldValue_t, 0)             \
  S(nv_grid_expiry, nvmlGridLicenseExpiry_t, 0)      \
  S(nv_grid_feature, nvmlGridLicensableFeature_t, 0) \
  S(nv_grid_features, nvmlGridLicensableFeatures_t, 0)

#ifdef STK_NV_ABI_CHECK
#define S(ours, theirs, larger_ok) typedef theirs ours##_t;
#else
#define S(ours, theirs, larger_ok) typedef struct ours ours##_t;
#endif
NV_STRUCTS(S)
#undef S

/* Entry points: name, type. Only the first three are required; the rest
 * may be absent from an older driver (their figures are then absent). */
#define NV_FUNCS(X)                                                                       \
  X(nvmlInit_v2, nv_ret (*)(void))                                                        \
  X(nvmlDeviceGetCount_v2, nv_ret (*)(unsigned *))                                        \
  X(nvmlDeviceGetHandleByIndex_v2, nv_ret (*)(unsigned, nv_dev *))                        \
  X(nvmlShutdown, nv_ret (*)(void))                                                       \
  X(nvmlErrorString, const char *(*)(nv_ret))                                             \
  X(nvmlSystemGetDriverVersion, nv_ret (*)(char *, unsigned))                             \
  X(nvmlDeviceGetName, nv_ret (*)(nv_dev, char *, unsigned))                              \
  X(nvmlDeviceGetUUID, nv_ret (*)(nv_dev, char *, unsigned))                              \
  X(nvmlDeviceGetPciInfo_v3, nv_ret (*)(nv_dev, nv_pci_t *))                              \
  X(nvmlDeviceGetUtilizationRates, nv_ret (*)(nv_dev, nv_util_t *))                       \
  X(nvmlDeviceGetMemoryInfo, nv_ret (*)(nv_dev, nv_memory_t *))                           \
  X(nvmlDeviceGetMemoryInfo_v2, nv_ret (*)(nv_dev, nv_memory_v2_t *))                     \
  X(nvmlDeviceGetPowerUsage, nv_ret (*)(nv_dev, unsigned *))                              \
  X(nvmlDeviceGetTotalEnergyConsumption, nv_ret (*)(nv_dev, unsigned long long *))        \
  X(nvmlDeviceGetTemperature, nv_ret (*)(nv_dev, unsigned, unsigned *))                   \
  X(nvmlDeviceGetClockInfo, nv_ret (*)(nv_dev, unsigned, unsigned *))                     \
  X(nvmlDeviceGetCurrentClocksEventReasons, nv_ret (*)(nv_dev, unsigned long long *))     \
  X(nvmlDeviceGetCurrentClocksThrottleReasons, nv_ret (*)(nv_dev, unsigned long long *))  \
  X(nvmlDeviceGetViolationStatus, nv_ret (*)(nv_dev, unsigned, nv_violation_t *))         \
  X(nvmlDeviceGetComputeRunningProcesses_v3, nv_ret (*)(nv_dev, unsigned *, nv_proc_t *)) \
  X(nvmlDeviceGetProcessUtilization,                                                      \
    nv_ret (*)(nv_dev, nv_proc_util_t *, unsigned *, unsigned long long))                 \
  X(nvmlEventSetCreate, nv_ret (*)(nv_evset *))                                           \
  X(nvmlDeviceRegisterEvents, nv_ret (*)(nv_dev, unsigned long long, nv_evset))           \
  X(nvmlEventSetWait_v2, nv_ret (*)(nv_evset, nv_event_t *, unsigned))                    \
  X(nvmlEventSetFree, nv_ret (*)(nv_evset))                                               \
  X(nvmlDeviceGetMigMode, nv_ret (*)(nv_dev, unsigned *, unsigned *))                     \
  X(nvmlDeviceGetMaxMigDeviceCount, nv_ret (*)(nv_dev, unsigned *))                       \
  X(nvmlDeviceGetMigDeviceHandleByIndex, nv_ret (*)(nv_dev, unsigned, nv_dev *))          \
  X(nvmlDeviceGetGpuInstanceId, nv_ret (*)(nv_dev, unsigned *))                           \
  X(nvmlGpmQueryDeviceSupport, nv_ret (*)(nv_dev, nv_gpm_support_t *))                    \
  X(nvmlGpmSampleAlloc, nv_ret (*)(nv_gpm_sample *))                                      \
  X(nvmlGpmSampleFree, nv_ret (*)(nv_gpm_sample))                                         \
  X(nvmlGpmSampleGet, nv_ret (*)(nv_dev, nv_gpm_sample))                                  \
  X(nvmlGpmMigSampleGet, nv_ret (*)(nv_dev, unsigned, nv_gpm_sample))                     \
  X(nvmlGpmMetricsGet, nv_ret (*)(nv_gpm_get_t *))                                        \
  X(nvmlDeviceGetTotalEccErrors, nv_ret (*)(nv_dev, unsigned, unsigned, unsigned long long *)) \
  X(nvmlDeviceGetRetiredPages, nv_ret (*)(nv_dev, unsigned, unsigned *, unsigned long long *)) \
  X(nvmlDeviceGetRetiredPagesPendingStatus, nv_ret (*)(nv_dev, unsigned *))               \
  X(nvmlDeviceGetRemappedRows, nv_ret (*)(nv_dev, unsigned *, unsigned *, unsigned *, unsigned *)) \
  X(nvmlDeviceGetPcieReplayCounter, nv_ret (*)(nv_dev, unsigned *))                       \
  X(nvmlDeviceGetEncoderUtilization, nv_ret (*)(nv_dev, unsigned *, unsigned *))          \
  X(nvmlDeviceGetDecoderUtilization, nv_ret (*)(nv_dev, unsigned *, unsigned *))          \
  X(nvmlDeviceGetNvLinkState, nv_ret (*)(nv_dev, unsigned, unsigned *))                   \
  X(nvmlDeviceGetNvLinkErrorCounter, nv_ret (*)(nv_dev, unsigned, unsigned, unsigned long long *)) \
  X(nvmlDeviceGetFieldValues, nv_ret (*)(nv_dev, int, nv_field_value_t *))               \
  X(nvmlDeviceGetGridLicensableFeatures_v4, nv_ret (*)(nv_dev, nv_grid_features_t *))

#endif
