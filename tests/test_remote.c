/* End to end against real servers on loopback (tests/tools/serve): nginx
 * for http://, s3rver (checks SigV4) for s3://, and the fault-injecting
 * proxy. Each test starts its own servers in its own directory; the runner
 * kills them with the test's process group. Tests skip, saying why, when a
 * server cannot be started here. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "stoker/stoker.h"
#include "test.h"

/* Run a shell command with $STK (the CLI) and $SERVE (the server tool)
 * set; returns its exit status and output. */
static int sh(char **out, const char *cmd) {
  const char *root = getenv("STOKER_ROOT");
  return test_sh(out, "STK=%s; SERVE=%s/tests/tools/serve; %s", test_stoker_bin(),
                 root ? root : ".", cmd);
}

/* A tfrecord dataset with a manifest in src/: n samples, per a shard. */
static void dataset(int n, int per) {
  char cmd[512], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "$STK gen src --format tfrecord --samples %d --size 4000 --samples-per-shard %d -q && "
           "$STK cache manifest src",
           n, per);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  free(out);
}

/* Start a server; its first output line (the URL) goes into url. */
static void serve(const char *args, char *url, size_t n) {
  char cmd[512], *out = NULL;
  snprintf(cmd, sizeof cmd, "$SERVE %s 2>serve.err", args);
  int rc = sh(&out, cmd);
  if (rc != 0) {
    char *why = NULL;
    sh(&why, "tail -3 serve.err");
    fprintf(stderr, "serve %s: %s\n", args, why);
    free(why);
    free(out);
    SKIP("cannot start a loopback server here (see above)");
  }
  out[strcspn(out, "\n")] = 0;
  snprintf(url, n, "%s", out);
  free(out);
}

static long json_u64(const char *json, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\": ", key);
  const char *p = strstr(json, k);
  return p ? strtol(p + strlen(k), NULL, 10) : -1;
}

TEST(remote_http_nginx_feed_verify_inspect) {
  dataset(300, 50);
  char url[256], cmd[1024], *out = NULL;
  serve("nginx src", url, sizeof url);
  snprintf(cmd, sizeof cmd, "$STK feed %s --cache-dir c --json -q", url);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_EQ(json_u64(out, "samples"), 300);
  CHECK_EQ(json_u64(out, "fetches"), 6);
  CHECK_EQ(json_u64(out, "errors"), 0);
  free(out);
  /* Same bytes as the local copy: verify checks every record's CRC, and a
   * second run is served from the disk tier alone. */
  snprintf(cmd, sizeof cmd, "$STK verify %s --cache-dir c -q && $STK feed %s --cache-dir c "
           "--json -q", url, url);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_EQ(json_u64(out, "fetches"), 0);
  free(out);
  snprintf(cmd, sizeof cmd, "$STK inspect %s --ram-cache-size 64MiB", url);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_CONTAINS(out, "300");
  free(out);
  CHECK_EQ(sh(&out, "$STK cache stats --cache-dir c"), 0);
  CHECK_CONTAINS(out, "6 shards");
  free(out);
}

TEST(remote_s3_signed_and_refused) {
  dataset(120, 40);
  char cmd[1024], *out = NULL;
  int rc = sh(&out, "$SERVE s3 src bucket 2>serve.err");
  if (rc != 0) {
    free(out);
    SKIP("cannot start the S3 server (npm s3rver) here");
  }
  char ep[256], key[128], secret[128];
  CHECK(sscanf(out, "%255s %127s %127s", ep, key, secret) == 3);
  free(out);
  snprintf(cmd, sizeof cmd,
           "AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s $STK feed s3://bucket --s3-endpoint %s "
           "--json -q",
           key, secret, ep);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_EQ(json_u64(out, "samples"), 120);
  free(out);
  /* Listing (no manifest needed): remove it from the bucket's view by
   * asking for a prefix-less listing of the format. */
  snprintf(cmd, sizeof cmd,
           "AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=wrong-secret-x9 $STK feed s3://bucket "
           "--s3-endpoint %s --retry-max-s 2 -q",
           key, ep);
  CHECK_EQ(sh(&out, cmd), 1);
  CHECK_CONTAINS(out, "SignatureDoesNotMatch");
  CHECK_MSG(!strstr(out, "wrong-secret-x9"), "the secret leaked: %s", out);
  free(out);
}

TEST(remote_faults_are_retried_and_counted) {
  dataset(400, 25);
  char up[256], px[512], cmd[1024], *out = NULL;
  serve("nginx src", up, sizeof up);
  snprintf(cmd, sizeof cmd, "proxy %s --p500 0.15 --p429 0.1 --p-reset 0.1 --p-truncate 0.1 "
           "--p-corrupt 0.05 --only-path .tfrecord --seed 3", up);
  serve(cmd, px, sizeof px);
  snprintf(cmd, sizeof cmd, "$STK feed %s --cache-dir c --json -q --epochs 2", px);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_EQ(json_u64(out, "samples"), 800);
  CHECK(json_u64(out, "retries") > 0);
  CHECK_EQ(json_u64(out, "errors"), 0);
  free(out);
  /* Every staged shard matches the manifest's checksum. */
  CHECK_EQ(sh(&out, "$STK cache verify --cache-dir c"), 0);
  CHECK_CONTAINS(out, "16 entries checked, 0 corrupt");
  free(out);
}

TEST(remote_origin_down_at_start) {
  char *out = NULL;
  CHECK_EQ(sh(&out, "$STK feed http://127.0.0.1:9/data --retry-max-s 1 -q"), 1);
  CHECK_CONTAINS(out, "127.0.0.1:9");
  CHECK_CONTAINS(out, "connect");
  free(out);
}

TEST(remote_origin_dies_mid_epoch) {
  dataset(400, 20);
  char up[256], px[512], cmd[2048], *out = NULL;
  serve("nginx src", up, sizeof up);
  snprintf(cmd, sizeof cmd, "proxy %s", up);
  serve(cmd, px, sizeof px);
  /* The origin fails every request for a while, then comes back: the run
   * completes, with retries counted. */
  snprintf(cmd, sizeof cmd,
           "($STK feed %s --ram-cache-size 64MiB --cache-prefetch off --shuffle none --consumer-ms 50 --batch 10 "
           "--prefetch-max 2 --json -q > run.json; echo $? > run.rc) & sleep 0.5; "
           "curl -s -X POST -d '{\"p500\": 1.0}' %s/__proxy/config >/dev/null; sleep 1.5; "
           "curl -s -X POST -d '{\"p500\": 0.0}' %s/__proxy/config >/dev/null; wait; cat run.rc run.json",
           px, px, px);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_MSG(!strncmp(out, "0\n", 2), "%s", out);
  CHECK_EQ(json_u64(out, "samples"), 400);
  CHECK(json_u64(out, "retries") > 0);
  free(out);
  /* It dies for good: a clear error once the retry budget is spent, and no
   * partial batch before it. */
  snprintf(cmd, sizeof cmd,
           "curl -s -X POST -d '{\"p500\": 1.0}' %s/__proxy/config >/dev/null; "
           "$STK feed %s --ram-cache-size 64MiB --retry-max-s 1 -q", px, px);
  CHECK_EQ(sh(&out, cmd), 1);
  CHECK_CONTAINS(out, "server error (HTTP 50");
  free(out);
}

TEST(remote_interrupted_fill_leaves_nothing) {
  dataset(100, 50);
  char up[256], px[512], cmd[2048], *out = NULL;
  serve("nginx src", up, sizeof up);
  snprintf(cmd, sizeof cmd, "proxy %s --latency-ms 4000 --only-path .tfrecord", up);
  serve(cmd, px, sizeof px);
  /* Ctrl-C while both shards are being fetched: exit 130, no temporaries. */
  snprintf(cmd, sizeof cmd,
           "$STK cache warm %s --cache-dir c -q & p=$!; sleep 1; kill -INT $p; wait $p; "
           "echo rc=$?; find c/tmp -type f | wc -l", px);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_CONTAINS(out, "rc=130");
  CHECK_CONTAINS(out, "\n0\n");
  free(out);
  /* Killed outright: what it left is swept by the next start, which then
   * stages everything. */
  snprintf(cmd, sizeof cmd,
           "$STK cache warm %s --cache-dir c -q & p=$!; sleep 1; kill -9 $p; wait $p; "
           "curl -s -X POST -d '{\"latency_ms\": 0, \"jitter_ms\": 0}' %s/__proxy/config >/dev/null; "
           "$STK cache warm %s --cache-dir c -q >/dev/null && find c/tmp -type f | wc -l && "
           "$STK cache verify --cache-dir c",
           px, px, px);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_CONTAINS(out, "0\n");
  CHECK_CONTAINS(out, "2 entries checked, 0 corrupt");
  free(out);
}

TEST(remote_eight_processes_one_download) {
  dataset(800, 50);
  char url[256], cmd[2048], *out = NULL;
  serve("nginx src", url, sizeof url);
  snprintf(cmd, sizeof cmd,
           "for i in 1 2 3 4 5 6 7 8; do $STK feed %s --cache-dir c --no-verify -q >/dev/null & "
           "done; wait; $STK cache stats --cache-dir c --json",
           url);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_EQ(json_u64(out, "fetches"), 16);
  CHECK_EQ(json_u64(out, "entry_count"), 16);
  free(out);
  /* Bytes fetched equal the dataset's size (one download per shard), plus
   * the manifest each process read. */
  CHECK_EQ(sh(&out, "echo $(( $(cat src/*.tfrecord | wc -c) + 8 * $(wc -c < src/stoker-manifest.json) ))"), 0);
  long bytes = strtol(out, NULL, 10);
  free(out);
  CHECK_EQ(sh(&out, "$STK cache stats --cache-dir c --json"), 0);
  CHECK_EQ(json_u64(out, "fetch_bytes"), bytes);
  free(out);
}

TEST(remote_bench_accepts_url) {
  dataset(160, 40);
  char url[256], cmd[1024], *out = NULL;
  serve("nginx src", url, sizeof url);
  snprintf(cmd, sizeof cmd,
           "$STK bench --data %s --cache-dir c --files 4 --samples-per-file 40 --record-size 4000 "
           "--batch 8 --accelerators 2 --epochs 2 --compute-s 0.002 -q",
           url);
  CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
  CHECK_CONTAINS(out, "verdict");
  CHECK_CONTAINS(out, "4 shards fetched");
  free(out);
}

TEST(remote_disk_full_falls_back_to_memory) {
  if (geteuid() != 0) SKIP("needs root to mount a small tmpfs");
  dataset(200, 50);
  char *out = NULL;
  if (system("mkdir -p small && mount -t tmpfs -o size=600k tmpfs small 2>/dev/null") != 0)
    SKIP("cannot mount a tmpfs here");
  /* Another tenant fills the file system: no fill fits, reads go on. */
  int rc = sh(&out, "head -c 560000 /dev/zero > small/other && "
                    "$STK feed src --cache-dir small/c --cache-min-free 1 --json -q");
  char *why = NULL;
  sh(&why, "find small/c/tmp -type f | wc -l");
  umount2("small", MNT_DETACH);
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_EQ(json_u64(out, "samples"), 200);
  CHECK_EQ(json_u64(out, "disk_full"), 4);
  CHECK_STR(why, "0\n");
  free(out);
  free(why);
}
