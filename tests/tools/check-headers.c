/* The header check: stoker declares the NVML and CUDA runtime ABI it
 * dlopens itself (src/gpu/nvml_abi.h, src/bench/cuda_abi.h), and this file
 * compiles those declarations beside the toolkit's nvml.h and
 * cuda_runtime_api.h so that any difference fails to compile, naming the
 * symbol, here rather than as a crash on a GPU machine. It covers, for
 * each library:
 *   - every entry point of NV_FUNCS / CU_FUNCS: the type stoker calls it
 *     through is the header's prototype exactly (return and parameter
 *     types, count, pointer levels; enums are unsigned int, see the abi
 *     headers), with the header's structs in place of stoker's;
 *   - every struct stoker declares by hand (NV_STRUCTS, cu_device_prop):
 *     its size and alignment, and the offset, size and type of each field,
 *     against the header's struct;
 *   - every constant stoker hard-codes (NV_CONSTS, CU_CONSTS, the clock
 *     event reason bits of src/gpu/nvml.h): equal to the header's.
 * The Makefile builds it as part of `make` where it finds the headers and
 * on demand with `make check-headers`, defining STK_CHECK_NVML and/or
 * STK_CHECK_CUDA for the headers it found. Nothing here runs: the object
 * is empty and links into nothing. */

/* Each name means itself: no nvmlInit -> nvmlInit_v2 renaming, so the
 * versioned names stoker looks up are the ones compared. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS

#include <stddef.h>

/* A field: stoker's struct and field, the header's type and field. FL
 * compares the layout only, for a field whose type is itself one of the
 * compared structs (an array of them, a nested anonymous struct). */
#define FIELD_LAYOUT(ours, f, theirs, g)                                    \
  _Static_assert(offsetof(struct ours, f) == offsetof(theirs, g),           \
                 #ours "." #f " is not at the offset of " #theirs "." #g);  \
  _Static_assert(sizeof(((struct ours *)0)->f) == sizeof(((theirs *)0)->g), \
                 #ours "." #f " is not the size of " #theirs "." #g);
#define FIELD(ours, f, theirs, g)                                                \
  FIELD_LAYOUT(ours, f, theirs, g)                                               \
  _Static_assert(__builtin_types_compatible_p(__typeof__(((struct ours *)0)->f), \
                                              __typeof__(((theirs *)0)->g)),     \
                 #ours "." #f " is not of the type of " #theirs "." #g);
#define SAME_CONST(ours, theirs, value)                    \
  _Static_assert((long long)(ours) == (long long)(theirs), \
                 #ours " is not equal to the header constant " #theirs);

#if STK_CHECK_NVML
#include <nvml.h>
#define STK_NV_ABI_CHECK 1
#include "../../src/gpu/nvml.h"
#include "../../src/gpu/nvml_abi.h"

/* Entry points: stoker's pointer type is the header's prototype. */
#define NV_FUNC(name, type)                                             \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), type), \
                 "nvml.h: " #name " is not the type src/gpu/nvml_abi.h declares");
NV_FUNCS(NV_FUNC)

/* The handles are nvml.h's (stoker names the same struct tags). */
_Static_assert(__builtin_types_compatible_p(nv_dev, nvmlDevice_t), "nv_dev is not nvmlDevice_t");
_Static_assert(__builtin_types_compatible_p(nv_evset, nvmlEventSet_t),
               "nv_evset is not nvmlEventSet_t");
_Static_assert(__builtin_types_compatible_p(nv_gpm_sample, nvmlGpmSample_t),
               "nv_gpm_sample is not nvmlGpmSample_t");
_Static_assert(__builtin_types_compatible_p(nv_ret, nvmlReturn_t), "nv_ret is not nvmlReturn_t");

/* Constants. NV_GPM_METRIC_MAX only sizes stoker's request (see
 * nv_gpm_get in nvml_abi.h): it may be larger, never smaller. */
#define NV_CONST(ours, theirs, value) SAME_CONST(ours, theirs, value)
NV_CONSTS(NV_CONST)
_Static_assert((long long)NV_GPM_METRIC_MAX >= (long long)NVML_GPM_METRIC_MAX,
               "NV_GPM_METRIC_MAX is smaller than NVML_GPM_METRIC_MAX of nvml.h");
_Static_assert(NV_VALUE_NOT_AVAILABLE_ULL == (unsigned long long)NVML_VALUE_NOT_AVAILABLE,
               "NV_VALUE_NOT_AVAILABLE_ULL is not NVML_VALUE_NOT_AVAILABLE of nvml.h");
SAME_CONST(STK__REASON_GPU_IDLE, nvmlClocksThrottleReasonGpuIdle, 0)
SAME_CONST(STK__REASON_APP_CLOCKS, nvmlClocksThrottleReasonApplicationsClocksSetting, 0)
SAME_CONST(STK__REASON_SW_POWER_CAP, nvmlClocksThrottleReasonSwPowerCap, 0)
SAME_CONST(STK__REASON_HW_SLOWDOWN, nvmlClocksThrottleReasonHwSlowdown, 0)
SAME_CONST(STK__REASON_SYNC_BOOST, nvmlClocksThrottleReasonSyncBoost, 0)
SAME_CONST(STK__REASON_SW_THERMAL, nvmlClocksThrottleReasonSwThermalSlowdown, 0)
SAME_CONST(STK__REASON_HW_THERMAL, nvmlClocksThrottleReasonHwThermalSlowdown, 0)
SAME_CONST(STK__REASON_HW_POWER_BRAKE, nvmlClocksThrottleReasonHwPowerBrakeSlowdown, 0)
SAME_CONST(STK__REASON_DISPLAY_CLOCK, nvmlClocksThrottleReasonDisplayClockSetting, 0)

/* Structs: size (or at least the size, where stoker's may be larger) and
 * alignment, then each field. */
#define NV_STRUCT(ours, theirs, larger_ok)                                                         \
  _Static_assert(                                                                                  \
      (larger_ok) ? sizeof(struct ours) >= sizeof(theirs) : sizeof(struct ours) == sizeof(theirs), \
      "struct " #ours " is not the size of " #theirs);                                             \
  _Static_assert(_Alignof(struct ours) == _Alignof(theirs),                                        \
                 "struct " #ours " is not aligned as " #theirs);
NV_STRUCTS(NV_STRUCT)

FIELD(nv_pci, bus_id_legacy, nvmlPciInfo_t, busIdLegacy)
FIELD(nv_pci, domain, nvmlPciInfo_t, domain)
FIELD(nv_pci, bus, nvmlPciInfo_t, bus)
FIELD(nv_pci, device, nvmlPciInfo_t, device)
FIELD(nv_pci, pci_device_id, nvmlPciInfo_t, pciDeviceId)
FIELD(nv_pci, pci_subsystem_id, nvmlPciInfo_t, pciSubSystemId)
FIELD(nv_pci, bus_id, nvmlPciInfo_t, busId)
FIELD(nv_util, gpu, nvmlUtilization_t, gpu)
FIELD(nv_util, memory, nvmlUtilization_t, memory)
FIELD(nv_memory, total, nvmlMemory_t, total)
FIELD(nv_memory, free, nvmlMemory_t, free)
FIELD(nv_memory, used, nvmlMemory_t, used)
FIELD(nv_memory_v2, version, nvmlMemory_v2_t, version)
FIELD(nv_memory_v2, total, nvmlMemory_v2_t, total)
FIELD(nv_memory_v2, reserved, nvmlMemory_v2_t, reserved)
FIELD(nv_memory_v2, free, nvmlMemory_v2_t, free)
FIELD(nv_memory_v2, used, nvmlMemory_v2_t, used)
FIELD(nv_proc, pid, nvmlProcessInfo_t, pid)
FIELD(nv_proc, used, nvmlProcessInfo_t, usedGpuMemory)
FIELD(nv_proc, gi, nvmlProcessInfo_t, gpuInstanceId)
FIELD(nv_proc, ci, nvmlProcessInfo_t, computeInstanceId)
FIELD(nv_proc_util, pid, nvmlProcessUtilizationSample_t, pid)
FIELD(nv_proc_util, ts, nvmlProcessUtilizationSample_t, timeStamp)
FIELD(nv_proc_util, sm, nvmlProcessUtilizationSample_t, smUtil)
FIELD(nv_proc_util, mem, nvmlProcessUtilizationSample_t, memUtil)
FIELD(nv_proc_util, enc, nvmlProcessUtilizationSample_t, encUtil)
FIELD(nv_proc_util, dec, nvmlProcessUtilizationSample_t, decUtil)
FIELD(nv_violation, ref_time, nvmlViolationTime_t, referenceTime)
FIELD(nv_violation, violation_ns, nvmlViolationTime_t, violationTime)
FIELD(nv_event, dev, nvmlEventData_t, device)
FIELD(nv_event, type, nvmlEventData_t, eventType)
FIELD(nv_event, data, nvmlEventData_t, eventData)
FIELD(nv_event, gi, nvmlEventData_t, gpuInstanceId)
FIELD(nv_event, ci, nvmlEventData_t, computeInstanceId)
FIELD(nv_gpm_metric, id, nvmlGpmMetric_t, metricId)
FIELD(nv_gpm_metric, ret, nvmlGpmMetric_t, nvmlReturn)
FIELD(nv_gpm_metric, value, nvmlGpmMetric_t, value)
FIELD_LAYOUT(nv_gpm_metric, info, nvmlGpmMetric_t, metricInfo)
FIELD(nv_gpm_metric, info.short_name, nvmlGpmMetric_t, metricInfo.shortName)
FIELD(nv_gpm_metric, info.long_name, nvmlGpmMetric_t, metricInfo.longName)
FIELD(nv_gpm_metric, info.unit, nvmlGpmMetric_t, metricInfo.unit)
FIELD(nv_gpm_get, version, nvmlGpmMetricsGet_t, version)
FIELD(nv_gpm_get, num, nvmlGpmMetricsGet_t, numMetrics)
FIELD(nv_gpm_get, s1, nvmlGpmMetricsGet_t, sample1)
FIELD(nv_gpm_get, s2, nvmlGpmMetricsGet_t, sample2)
_Static_assert(offsetof(struct nv_gpm_get, metrics) == offsetof(nvmlGpmMetricsGet_t, metrics),
               "nv_gpm_get.metrics is not at the offset of nvmlGpmMetricsGet_t.metrics");
FIELD(nv_gpm_support, version, nvmlGpmSupport_t, version)
FIELD(nv_gpm_support, supported, nvmlGpmSupport_t, isSupportedDevice)
FIELD(nv_field_value, field_id, nvmlFieldValue_t, fieldId)
FIELD(nv_field_value, scope_id, nvmlFieldValue_t, scopeId)
FIELD(nv_field_value, timestamp, nvmlFieldValue_t, timestamp)
FIELD(nv_field_value, latency_us, nvmlFieldValue_t, latencyUsec)
FIELD(nv_field_value, value_type, nvmlFieldValue_t, valueType)
FIELD(nv_grid_expiry, year, nvmlGridLicenseExpiry_t, year)
FIELD(nv_grid_expiry, month, nvmlGridLicenseExpiry_t, month)
FIELD(nv_grid_expiry, day, nvmlGridLicenseExpiry_t, day)
FIELD(nv_grid_expiry, hour, nvmlGridLicenseExpiry_t, hour)
FIELD(nv_grid_expiry, min, nvmlGridLicenseExpiry_t, min)
FIELD(nv_grid_expiry, sec, nvmlGridLicenseExpiry_t, sec)
FIELD(nv_grid_expiry, status, nvmlGridLicenseExpiry_t, status)
FIELD(nv_grid_feature, code, nvmlGridLicensableFeature_t, featureCode)
FIELD(nv_grid_feature, state, nvmlGridLicensableFeature_t, featureState)
FIELD(nv_grid_feature, license_info, nvmlGridLicensableFeature_t, licenseInfo)
FIELD(nv_grid_feature, product_name, nvmlGridLicensableFeature_t, productName)
FIELD(nv_grid_feature, enabled, nvmlGridLicensableFeature_t, featureEnabled)
FIELD_LAYOUT(nv_grid_feature, expiry, nvmlGridLicensableFeature_t, licenseExpiry)
FIELD(nv_grid_features, supported, nvmlGridLicensableFeatures_t, isGridLicenseSupported)
FIELD(nv_grid_features, count, nvmlGridLicensableFeatures_t, licensableFeaturesCount)
FIELD_LAYOUT(nv_grid_features, features, nvmlGridLicensableFeatures_t, gridLicensableFeatures)
FIELD(nv_field_value, ret, nvmlFieldValue_t, nvmlReturn)
FIELD_LAYOUT(nv_field_value, value, nvmlFieldValue_t, value)
/* The union nvmlValue_t, member by member (FIELD takes structs). */
#define UNION_MEMBER(f, g)                                                                   \
  _Static_assert(offsetof(union nv_value, f) == offsetof(nvmlValue_t, g),                   \
                 "nv_value." #f " is not at the offset of nvmlValue_t." #g);                \
  _Static_assert(__builtin_types_compatible_p(__typeof__(((union nv_value *)0)->f),         \
                                              __typeof__(((nvmlValue_t *)0)->g)),           \
                 "nv_value." #f " is not of the type of nvmlValue_t." #g);
UNION_MEMBER(d, dVal)
UNION_MEMBER(si, siVal)
UNION_MEMBER(ui, uiVal)
UNION_MEMBER(ul, ulVal)
UNION_MEMBER(ull, ullVal)
UNION_MEMBER(sll, sllVal)
UNION_MEMBER(us, usVal)
_Static_assert(sizeof(union nv_value) == sizeof(nvmlValue_t), "nv_value is not the size of nvmlValue_t");
#endif /* STK_CHECK_NVML */

#if STK_CHECK_CUDA
#include <cuda_runtime_api.h>
#define STK_CU_ABI_CHECK 1
#include "../../src/bench/cuda_abi.h"

#define CU_FUNC(name, type, required)                                   \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), type), \
                 "cuda_runtime_api.h: " #name " is not the type src/bench/cuda_abi.h declares");
CU_FUNCS(CU_FUNC)
_Static_assert(__builtin_types_compatible_p(cu_err, cudaError_t), "cu_err is not cudaError_t");
_Static_assert(__builtin_types_compatible_p(cu_memcpy_kind, enum cudaMemcpyKind),
               "cu_memcpy_kind is not enum cudaMemcpyKind");
_Static_assert(__builtin_types_compatible_p(cu_stream, cudaStream_t), "cu_stream is not cudaStream_t");
_Static_assert(__builtin_types_compatible_p(cu_event, cudaEvent_t), "cu_event is not cudaEvent_t");
#define CU_CONST(ours, theirs, value) SAME_CONST(ours, theirs, value)
CU_CONSTS(CU_CONST)

/* cu_device_prop: the name first, and room for the header's whole struct. */
FIELD(cu_device_prop, name, struct cudaDeviceProp, name)
_Static_assert(sizeof(struct cu_device_prop) >= sizeof(struct cudaDeviceProp),
               "struct cu_device_prop is smaller than struct cudaDeviceProp");
#endif /* STK_CHECK_CUDA */

/* Not empty, whatever was found. */
typedef int stk__check_headers_done;
