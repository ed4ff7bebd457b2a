/* Checksums the origin sends: S3 in checksum mode returns the CRC32C it
 * stored for an object (x-amz-checksum-crc32c) with a whole-object GET,
 * and the body must match it; ranged reads carry none. moto's S3
 * (tests/tools/serve s3) stores a checksum given at upload without
 * checking it, which is how a wrong one is made here. */
#include <stdlib.h>
#include <string.h>

#include "../src/cache/origin.h"
#include "stoker/stoker.h"
#include "test.h"

static int sh(char **out, const char *cmd) {
  const char *root = getenv("STOKER_ROOT");
  return test_sh(out, "STK=%s; SERVE=%s/tests/tools/serve; %s", test_stoker_bin(),
                 root ? root : ".", cmd);
}

/* base64 of crc's four big-endian bytes (S3's form of a CRC32C). */
static void b64_crc(uint32_t crc, char out[9]) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint64_t v = (uint64_t)crc << 4;
  for (int i = 5; i >= 0; i--, v >>= 6) out[i] = a[v & 63];
  memcpy(out + 6, "==", 3);
}

/* Upload path as KEY to the bucket with x-amz-checksum-crc32c set to crc
 * (moto keeps it as given). */
static void put_with_crc(const char *ep, const char *key, const char *secret, const char *path,
                         const char *name, uint32_t crc) {
  char b64[9], cmd[1024], *out = NULL;
  b64_crc(crc, b64);
  snprintf(cmd, sizeof cmd,
           "curl -sS -o /dev/null -w '%%{http_code}' --aws-sigv4 aws:amz:us-east-1:s3 "
           "--user '%s:%s' -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "
           "-H 'x-amz-sdk-checksum-algorithm: CRC32C' -H 'x-amz-checksum-crc32c: %s' "
           "-T %s %s/bkt/%s",
           key, secret, b64, path, ep, name);
  CHECK_MSG(sh(&out, cmd) == 0 && !strcmp(out, "200"), "upload %s: %s", name, out);
  free(out);
}

TEST(origin_s3_checksum_of_whole_objects) {
  char *out = NULL;
  if (sh(&out, "$SERVE setup") != 0) {
    free(out);
    SKIP("moto[server] is not installed (scripts/install-deps test)");
  }
  free(out);
  enum { N = 100000 };
  uint8_t *data = malloc(N);
  for (int i = 0; i < N; i++) data[i] = (uint8_t)(i * 7 + 3);
  CHECK_EQ(system("mkdir -p src/p"), 0);
  test_write_file("src/p/plain.bin", data, N);
  test_write_file("data.bin", data, N);
  CHECK_MSG(sh(&out, "$SERVE s3 src bkt 2>serve.err || { cat serve.err; exit 1; }") == 0, "%s",
            out);
  char ep[256], key[128], secret[128], err[STK_ERRMSG_MAX] = "";
  CHECK(sscanf(out, "%255s %127s %127s", ep, key, secret) == 3);
  free(out);
  uint32_t crc = stk_crc32c(0, data, N);
  put_with_crc(ep, key, secret, "data.bin", "g/good.bin", crc);
  put_with_crc(ep, key, secret, "data.bin", "b/bad.bin", crc ^ 1);
  setenv("AWS_ACCESS_KEY_ID", key, 1);
  setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
  setenv("AWS_ENDPOINT_URL", ep, 1);
  unsetenv("AWS_SESSION_TOKEN");
  unsetenv("AWS_PROFILE");
  setenv("AWS_SHARED_CREDENTIALS_FILE", "no-such-file", 1);
  setenv("AWS_CONFIG_FILE", "no-such-file", 1);

  struct stk_origin_opts oo = {.max_attempts = 2, .retry_max_s = 2};
  struct stk_origin *o;
  CHECK_MSG(stk__origin_open(&o, "s3://bkt", &oo, err) == 0, "%s", err);
  FILE *f = tmpfile();
  int fd = fileno(f);
  struct stk_obj_info info;
  /* The whole object: checked against the stored CRC32C, which matches. */
  CHECK_MSG(stk__origin_get(o, "g/good.bin", 0, UINT64_MAX, fd, 0, &info, NULL, err) == 0, "%s",
            err);
  CHECK_EQ(info.origin_checked, 1);
  CHECK_EQ(info.size, N);
  /* A range: nothing of its own to check against. */
  CHECK_OK(stk__origin_get(o, "g/good.bin", 10, 100, fd, 0, &info, NULL, err));
  CHECK_EQ(info.origin_checked, 0);
  /* No stored checksum: nothing to check. */
  CHECK_OK(stk__origin_get(o, "p/plain.bin", 0, UINT64_MAX, fd, 0, &info, NULL, err));
  CHECK_EQ(info.origin_checked, 0);
  /* A body that does not match what S3 says it stored fails, named. */
  CHECK_EQ(stk__origin_get(o, "b/bad.bin", 0, UINT64_MAX, fd, 0, &info, NULL, err), STK_ECRC);
  CHECK_CONTAINS(err, "s3://bkt/b/bad.bin");
  CHECK_CONTAINS(err, "x-amz-checksum-crc32c");
  fclose(f);
  stk__origin_close(o);

  /* Through the cache: a shard is fetched whole (no Range) so that S3
   * sends its checksum; verify counts it, and fails on the bad one. */
  CHECK_MSG(sh(&out, "$STK verify s3://bkt/g/ --format files --cache-dir cd -q 2>&1") == 0, "%s",
            out);
  CHECK_CONTAINS(out, "1 matched the origin's checksum");
  free(out);
  CHECK(sh(&out, "$STK verify s3://bkt/b/ --format files --retry-max-s 2 -q 2>&1") != 0);
  CHECK_CONTAINS(out, "x-amz-checksum-crc32c");
  free(out);
  free(data);
}
