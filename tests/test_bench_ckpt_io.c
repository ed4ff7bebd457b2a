/* `stoker bench --checkpoint-io torch`: the tensors DLIO's PyTorch backend
 * writes per file (pinned against strace of DLIO on llama_7b_small), the
 * same bytes per checkpoint as the default writer, the files read back,
 * torch's zip CRC-32, and refused values. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/base/base.h"
#include "../src/bench/bench_impl.h"
#include "stoker/stoker.h"
#include "test.h"

static struct stk_workload tw;

/* bench/dlio_ckpt.py's llama_7b_small: llama_7b's config with 4 layers of
 * hidden size 1024 (tensor, pipeline 1, ZeRO 1). */
static void llama_small(void) {
  memset(&tw, 0, sizeof tw);
  struct stk_ckpt_spec *c = &tw.ckpt;
  snprintf(tw.name, sizeof tw.name, "llama_7b_small");
  snprintf(c->model_type, sizeof c->model_type, "transformer");
  snprintf(c->model_dtype, sizeof c->model_dtype, "fp16");
  snprintf(c->optimizer_dtype, sizeof c->optimizer_dtype, "fp32");
  c->enabled = c->no_train = 1;
  c->num_layers = 4;
  c->hidden = 1024;
  c->ffn = 2752;
  c->heads = c->kv_heads = 8;
  c->vocab = 32000;
  c->tp = c->pp = 1;
  c->zero_stage = 1;
}

/* The data writes strace shows for DLIO's llama_7b_small save (its write()
 * calls less the zip headers gathered with them): the model file's 27
 * tensors in the state's order, the optimizer's three pairs. */
TEST(bench_ckpt_io_torch_tensors_match_dlio) {
  char err[STK_ERRMSG_MAX];
  llama_small();
  uint64_t t[64], want_model[27], want_opt[6] = {464556032, 20480, 464556032, 20480, 464556032, 20480};
  size_t n = 0, nt;
  want_model[n++] = 65536000;
  for (int l = 0; l < 4; l++) {
    uint64_t layer[6] = {2048, 6291456, 2097152, 2048, 11272192, 5636096};
    for (int k = 0; k < 6; k++) want_model[n++] = layer[k];
  }
  want_model[n++] = 65536000;
  want_model[n++] = 2048;
  struct stk_ckpt_file f[8];
  size_t nf;
  CHECK_OK(stk_ckpt_rank_files(&tw, 1, 0, f, 8, &nf, err));
  CHECK_EQ(nf, 2);
  CHECK_OK(stk__ckpt_file_tensors(&tw, 1, 0, 0, t, 64, &nt, err));
  CHECK_EQ(nt, 27);
  uint64_t sum = 0;
  for (size_t i = 0; i < nt; i++) {
    CHECK_MSG(t[i] == want_model[i], "model tensor %zu: %llu, DLIO writes %llu", i,
              (unsigned long long)t[i], (unsigned long long)want_model[i]);
    sum += t[i];
  }
  CHECK_EQ(sum, f[0].bytes);
  CHECK_OK(stk__ckpt_file_tensors(&tw, 1, 0, 1, t, 64, &nt, err));
  CHECK_EQ(nt, 6);
  sum = 0;
  for (size_t i = 0; i < nt; i++) {
    CHECK_EQ(t[i], want_opt[i]);
    sum += t[i];
  }
  CHECK_EQ(sum, f[1].bytes);
  CHECK_EQ(f[0].bytes + f[1].bytes, 1626007552ull);
  /* no third file; a cap too small says how many are needed */
  CHECK_EQ(stk__ckpt_file_tensors(&tw, 1, 0, 2, t, 64, &nt, err), STK_EINVAL);
  CHECK_CONTAINS(err, "has 2 checkpoint files");
  CHECK_EQ(stk__ckpt_file_tensors(&tw, 1, 0, 0, t, 4, &nt, err), STK_ERANGE);
  CHECK_EQ(nt, 27);
  /* Pipeline 2 with ZeRO 1: a file per layer, each its own tensors. */
  tw.ckpt.pp = 2;
  CHECK_OK(stk_ckpt_rank_files(&tw, 2, 1, f, 8, &nf, err));
  CHECK_EQ(nf, 5); /* layers 3, 4, 5 (the LM head), 6 (the norm), the optimizer */
  CHECK_STR(f[2].name, "layer_5-model_1_model_states.pt");
  CHECK_OK(stk__ckpt_file_tensors(&tw, 2, 1, 2, t, 64, &nt, err));
  CHECK(nt == 1 && t[0] == 65536000);
  CHECK_OK(stk__ckpt_file_tensors(&tw, 2, 1, 0, t, 64, &nt, err));
  CHECK(nt == 6 && t[1] == 6291456);
}

/* torch's zip CRC-32 is the zip polynomial's: the check value, and ISA-L's
 * figure on an odd length at an odd address. */
TEST(bench_ckpt_io_torch_crc32) {
  CHECK_EQ(stk__ckpt_torch_crc32(0, "123456789", 9), 0xcbf43926u);
  size_t n = 100003;
  unsigned char *b = malloc(n + 1);
  CHECK(b != NULL);
  for (size_t i = 0; i <= n; i++) b[i] = (unsigned char)(i * 131 + (i >> 7));
  CHECK_EQ(stk__ckpt_torch_crc32(0, b + 1, n), stk__crc32(0, b + 1, n));
  CHECK_EQ(stk__ckpt_torch_crc32(stk__ckpt_torch_crc32(0, b + 1, 77), b + 78, n - 77),
           stk__crc32(0, b + 1, n));
  free(b);
}

/* The file holds the tensors one after another, byte for byte, small ones
 * gathered; the reader reads them all, and counts a longer file. */
TEST(bench_ckpt_io_torch_write_read) {
  uint64_t t[] = {3, 10000, 5, 5, 8192, 1, 8187, 20000, 2};
  size_t nt = sizeof t / sizeof t[0];
  uint64_t total = 0;
  for (size_t i = 0; i < nt; i++) total += t[i];
  char *state = malloc(total);
  CHECK(state != NULL);
  for (uint64_t i = 0; i < total; i++) state[i] = (char)(i * 7 + 3);
  int fd = open("t.pt", O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  uint32_t crcs = 0, want = 0;
  CHECK_EQ(stk__ckpt_torch_write(fd, t, nt, state, &crcs), 0);
  const char *p = state;
  for (size_t i = 0; i < nt; p += t[i], i++) want ^= stk__crc32(0, p, t[i]);
  CHECK_EQ(crcs, want);
  close(fd);
  struct stat st;
  CHECK(stat("t.pt", &st) == 0 && (uint64_t)st.st_size == total);
  char *back = malloc(total);
  fd = open("t.pt", O_RDONLY);
  CHECK(fd >= 0 && read(fd, back, total) == (ssize_t)total);
  CHECK(memcmp(back, state, total) == 0);
  CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
  uint64_t got = 0;
  CHECK_EQ(stk__ckpt_torch_read(fd, t, nt, &got), 0);
  CHECK_EQ(got, total);
  close(fd);
  fd = open("t.pt", O_WRONLY | O_APPEND);
  CHECK(fd >= 0 && write(fd, "xy", 2) == 2);
  close(fd);
  fd = open("t.pt", O_RDONLY);
  CHECK_EQ(stk__ckpt_torch_read(fd, t, nt, &got), 0);
  CHECK_EQ(got, total + 2);
  close(fd);
  free(back);
  free(state);
}

/* The torch mode's state and load buffers are held as torch holds a
 * tensor: 64-byte aligned, and not advised for transparent huge pages
 * (no "hg" in the mapping's VmFlags), as a torch.rand tensor's mapping
 * in DLIO's process is not. */
TEST(bench_ckpt_io_torch_alloc_as_torch) {
  uint64_t n = 64ull << 20;
  char *p = stk__ckpt_torch_alloc(n);
  CHECK(p != NULL);
  CHECK_EQ((uintptr_t)p % 64, 0);
  memset(p, 1, (size_t)n);
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) {
    free(p);
    SKIP("no /proc/self/smaps");
  }
  char line[512];
  int in = 0, seen = 0, advised = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && !strncmp(line, "VmFlags:", 8)) {
      seen = 1;
      advised = strstr(line, " hg") != NULL;
    }
  }
  fclose(f);
  free(p);
  CHECK_MSG(seen, "no VmFlags line for the state's mapping");
  CHECK_MSG(!advised, "the state's mapping is advised for huge pages; torch's is not");
  void *z = stk__ckpt_torch_alloc(0); /* an empty tensor still has an address */
  CHECK(z != NULL);
  free(z);
}

/* A 4-rank checkpoint-only run in each mode: the same files with the same
 * sizes (scaled), the loads read them back, the report names the mode. */
TEST(bench_ckpt_io_torch_same_bytes_as_tier) {
  char err[STK_ERRMSG_MAX];
  memset(&tw, 0, sizeof tw);
  struct stk_ckpt_spec *c = &tw.ckpt;
  snprintf(tw.name, sizeof tw.name, "tiny");
  snprintf(c->model_type, sizeof c->model_type, "transformer");
  c->enabled = c->no_train = 1;
  c->num_layers = 5;
  c->hidden = 64;
  c->vocab = 1000;
  c->ffn = 256;
  c->heads = 4;
  c->kv_heads = 2;
  c->tp = c->pp = 2;
  c->zero_stage = 1;
  c->num_write = 2;
  c->num_read = 2;
  c->time_between_s = 0.001;
  struct stk_bench_opts o;
  memset(&o, 0, sizeof o);
  o.w = &tw;
  o.accelerators = 4;
  o.ckpt_scale = 0.3;
  o.keep_checkpoints = 1;
  struct stk_bench_result r[2];
  const char *dirs[2] = {"ck_tier", "ck_torch"};
  for (int m = 0; m < 2; m++) {
    o.ckpt_dir = dirs[m];
    o.ckpt_io = m ? STK_CKPT_IO_TORCH : STK_CKPT_IO_TIER;
    CHECK_MSG(stk_bench_ckpt_run(&o, &r[m], err) == 0, "%s", err);
    CHECK(r[m].ckpt.saves == 2 && r[m].ckpt.loads == 2 && r[m].ckpt.io == o.ckpt_io);
  }
  CHECK_EQ(r[0].ckpt.bytes, r[1].ckpt.bytes);
  uint64_t seen = 0;
  for (uint32_t rank = 0; rank < 4; rank++) {
    struct stk_ckpt_file f[16];
    size_t n;
    CHECK_OK(stk_ckpt_rank_files(&tw, 4, rank, f, 16, &n, err));
    for (size_t i = 0; i < n; i++) {
      struct stat a, b;
      char pa[2048], pb[2048];
      snprintf(pa, sizeof pa, "ck_tier/global_epoch1_step2/%s", f[i].name);
      snprintf(pb, sizeof pb, "ck_torch/global_epoch1_step2/%s", f[i].name);
      CHECK_MSG(stat(pa, &a) == 0 && stat(pb, &b) == 0, "%s", f[i].name);
      CHECK_MSG(a.st_size == b.st_size, "%s: tier %lld B, torch %lld B", f[i].name,
                (long long)a.st_size, (long long)b.st_size);
      seen += (uint64_t)b.st_size;
    }
  }
  CHECK_EQ(seen, r[1].ckpt.bytes);
  stk_bench_result_free(&r[0]);
  stk_bench_result_free(&r[1]);
}

/* Options for one save and one load of llama_7b_small at 1/1000 of its
 * size, into dir. */
static void one_small_ckpt(struct stk_bench_opts *o, const char *dir) {
  llama_small();
  tw.ckpt.num_write = tw.ckpt.num_read = 1;
  memset(o, 0, sizeof *o);
  o->w = &tw;
  o->accelerators = 1;
  o->ckpt_dir = dir;
  o->ckpt_scale = 0.001;
}

/* Values the library refuses, one line each. */
TEST(bench_ckpt_io_bad_values) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  one_small_ckpt(&o, "ck_bad");
  struct stk_bench_result r;
  o.ckpt_io = 7;
  CHECK_EQ(stk_bench_ckpt_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "checkpoint io 7 is not tier (0) or torch (1)");
  CHECK(!strchr(err, '\n'));
  o.ckpt_io = STK_CKPT_IO_TORCH;
  o.direct = 1;
  CHECK_EQ(stk_bench_ckpt_run(&o, &r, err), STK_EINVAL);
  CHECK_CONTAINS(err, "drop --direct");
  CHECK(!strchr(err, '\n'));
  /* A state that cannot be held (llama_70b's shape on one rank: about a
   * terabyte) is refused before anything is allocated or written. */
  o.direct = 0;
  o.ckpt_scale = 1;
  tw.ckpt.num_layers = 80;
  tw.ckpt.hidden = 8192;
  tw.ckpt.ffn = 28672;
  tw.ckpt.heads = 64;
  o.ckpt_dir = "ck_big";
  int rc = stk_bench_ckpt_run(&o, &r, err);
  CHECK_MSG(rc == STK_ENOMEM, "rc %d: %s", rc, err);
  CHECK_CONTAINS(err, "this process may use; lower --checkpoint-scale (now 1)");
  CHECK(!strchr(err, '\n'));
  struct stat st;
  CHECK(stat("ck_big/global_epoch1_step1", &st) != 0);
}

/* MPI ranks on one host hold their states side by side: the torch mode's
 * memory check counts every process on the host (host_procs, which
 * stk_bench_mpi_attach sets), so a state one process could hold is
 * refused when ten million would hold it at once. */
TEST(bench_ckpt_io_torch_counts_the_hosts_processes) {
  char err[STK_ERRMSG_MAX];
  struct stk_bench_opts o;
  one_small_ckpt(&o, "ck_procs");
  o.ckpt_io = STK_CKPT_IO_TORCH;
  struct stk_bench_result r;
  o.host_procs = 1;
  int rc = stk_bench_ckpt_run(&o, &r, err);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
  stk_bench_result_free(&r);
  o.host_procs = 10000000;
  rc = stk_bench_ckpt_run(&o, &r, err);
  CHECK_MSG(rc == STK_ENOMEM, "rc %d: %s", rc, err);
  CHECK_CONTAINS(err, "with a load's reads, times the 10000000 processes on this host, is more than half");
  CHECK(!strchr(err, '\n'));
  /* A program built before host_procs: its struct_size ends where the
   * field begins, and what lies past it is not read (a field placed in
   * the tail padding after ckpt_io would have been inside that size). */
  _Static_assert(offsetof(struct stk_bench_opts, host_procs) >=
                     (offsetof(struct stk_bench_opts, ckpt_io) + sizeof(int) +
                      _Alignof(struct stk_bench_opts) - 1) / _Alignof(struct stk_bench_opts) *
                         _Alignof(struct stk_bench_opts),
                 "host_procs starts in the padding an older struct_size covers");
  memset((char *)&o + offsetof(struct stk_bench_opts, host_procs), 0xff,
         sizeof o - offsetof(struct stk_bench_opts, host_procs));
  o.struct_size = offsetof(struct stk_bench_opts, host_procs);
  rc = stk_bench_ckpt_run(&o, &r, err);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
  stk_bench_result_free(&r);
}
