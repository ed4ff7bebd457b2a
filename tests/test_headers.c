/* The header check (tests/tools/check-headers.c, `make check-headers`):
 * where the CUDA toolkit's headers are installed, stoker's own declarations
 * of the NVML and CUDA runtime ABI it dlopens (src/gpu/nvml_abi.h,
 * src/bench/cuda_abi.h) compile beside nvml.h and cuda_runtime_api.h, and
 * a copy with a wrong entry point type, struct field and constant planted
 * in it fails to compile, naming each. Without the headers the test skips
 * and says where make looked. */
#include "test.h"

/* `make check-headers` in the source tree, into a build folder of this
 * test's own; extra: more make arguments. The caller frees *out. */
static int make_check(char **out, const char *extra) {
  const char *root = getenv("STOKER_ROOT");
  /* Not the outer make's jobserver or flags: this is a make of its own. */
  return test_sh(out,
                 "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C '%s' "
                 "BUILD=\"$PWD/b\" %s check-headers",
                 root ? root : ".", extra);
}

/* The line of out that begins with prefix (without its newline), in buf. */
static const char *line_of(const char *out, const char *prefix, char *buf, size_t len) {
  const char *p = strstr(out, prefix);
  if (!p) return "";
  size_t n = strcspn(p, "\n");
  snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p);
  return buf;
}

TEST(abi_headers_match) {
  char *out = NULL, nv_line[1024], cu_line[1024];
  int rc = make_check(&out, "");
  CHECK_MSG(rc == 0, "make check-headers failed:\n%s", out);
  int nvml = strstr(out, "nvml.h: not found") == NULL;
  int cuda = strstr(out, "cuda_runtime_api.h: not found") == NULL;
  line_of(out, "check-headers: nvml.h:", nv_line, sizeof nv_line);
  line_of(out, "check-headers: cuda_runtime_api.h:", cu_line, sizeof cu_line);
  if (!nvml && !cuda) {
    char why[2200];
    snprintf(why, sizeof why, "no CUDA toolkit headers to check against: %s; %s", cu_line, nv_line);
    free(out);
    SKIP(why);
  }
  CHECK_CONTAINS(out, "check-headers: stoker's declarations match");
  free(out);

  /* A copy of the check and the abi headers, each with mismatches planted:
   * an entry point's parameter type, a struct field, a constant. */
  const char *root = getenv("STOKER_ROOT");
  rc = test_sh(
      &out,
      "R='%s'; mkdir -p t/tests/tools t/src/gpu t/src/bench && "
      "cp \"$R/tests/tools/check-headers.c\" t/tests/tools/ && "
      "cp \"$R/src/gpu/nvml.h\" \"$R/src/gpu/nvml_abi.h\" t/src/gpu/ && "
      "cp \"$R/src/bench/cuda_abi.h\" t/src/bench/ && "
      "sed -i -e 's/X(nvmlDeviceGetPowerUsage, nv_ret (\\*)(nv_dev, unsigned /&long long /' "
      "-e 's/^  unsigned long long total, free, used;/  unsigned total, free, used;/' "
      "-e 's/C(NV_CLOCK_MEM, NVML_CLOCK_MEM, 2)/C(NV_CLOCK_MEM, NVML_CLOCK_MEM, 3)/' "
      "t/src/gpu/nvml_abi.h && "
      "sed -i -e 's/X(cudaFree, cu_err (\\*)(void \\*/&*/' "
      "-e 's/C(CU_MEMCPY_HOST_TO_DEVICE, cudaMemcpyHostToDevice, 1)/"
      "C(CU_MEMCPY_HOST_TO_DEVICE, cudaMemcpyHostToDevice, 2)/' "
      "-e 's/char rest\\[16384 - 256\\]/char rest[1]/' t/src/bench/cuda_abi.h && "
      "grep -q 'nv_dev, unsigned long long \\*))' t/src/gpu/nvml_abi.h && "
      "grep -q '^  unsigned total, free, used;' t/src/gpu/nvml_abi.h && "
      "grep -q 'NVML_CLOCK_MEM, 3' t/src/gpu/nvml_abi.h && "
      "grep -q 'cudaFree, cu_err (\\*)(void \\*\\*)' t/src/bench/cuda_abi.h && "
      "grep -q 'cudaMemcpyHostToDevice, 2' t/src/bench/cuda_abi.h && "
      "grep -q 'char rest\\[1\\]' t/src/bench/cuda_abi.h",
      root ? root : ".");
  CHECK_MSG(rc == 0,
            "planting the mismatches failed (the abi headers changed? update this test):\n%s", out);
  free(out);
  rc = make_check(&out, "HDR_SRC=\"$PWD/t/tests/tools/check-headers.c\"");
  CHECK_MSG(rc != 0, "the check passed with mismatches planted:\n%s", out);
  CHECK_CONTAINS(out, "differ from the toolkit's headers");
  if (nvml) {
    CHECK_CONTAINS(out,
                   "nvml.h: nvmlDeviceGetPowerUsage is not the type src/gpu/nvml_abi.h declares");
    CHECK_CONTAINS(out, "struct nv_memory is not the size of nvmlMemory_t");
    CHECK_CONTAINS(out, "nv_memory.total is not the size of nvmlMemory_t.total");
    CHECK_CONTAINS(out, "NV_CLOCK_MEM is not equal to the header constant NVML_CLOCK_MEM");
    /* The rest matched: only the planted lines are named. */
    CHECK(!strstr(out, "nvmlDeviceGetName is not"));
  }
  if (cuda) {
    CHECK_CONTAINS(out,
                   "cuda_runtime_api.h: cudaFree is not the type src/bench/cuda_abi.h declares");
    CHECK_CONTAINS(
        out, "CU_MEMCPY_HOST_TO_DEVICE is not equal to the header constant cudaMemcpyHostToDevice");
    CHECK_CONTAINS(out, "struct cu_device_prop is smaller than struct cudaDeviceProp");
    CHECK(!strstr(out, "cudaMalloc is not"));
  }
  free(out);
  /* Half a check is not a pass: say which header is missing. */
  if (!nvml || !cuda) {
    char why[2200];
    snprintf(why, sizeof why, "%s matched (and caught the planted mismatches), but %s",
             nvml ? "nvml.h" : "cuda_runtime_api.h", nvml ? cu_line : nv_line);
    SKIP(why);
  }
}
