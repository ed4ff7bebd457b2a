/* Internals shared by the files of src/bench. */
#ifndef STOKER_BENCH_IMPL_H
#define STOKER_BENCH_IMPL_H

#include "stoker/bench.h"

/* Fill r->verdict and r->bottleneck from the run's figures and the
 * loader's stage stats. */
void stk__bench_verdict(struct stk_bench_result *r);
/* How many batches the warm-up waits for: the ring's depth and the two
 * beyond it, but no more than fit the loader's memory cap with every batch
 * at its largest (batch_bytes), so that the wait can always end. At least 1. */
uint32_t stk__bench_fill(uint32_t prefetch, uint64_t mem_cap, double batch_bytes);

/* Fill AU, throughput and the time split of r from r->per ([epochs]
 * [accelerators]); used after a run and after gathering runs (MPI). */
void stk__bench_aggregate(const struct stk_bench_opts *o, struct stk_bench_result *r);

/* /proc figures at one moment: the machine's CPU time (ticks of all CPUs)
 * and this process's device reads. root is "/proc" (tests pass a folder
 * with stat and self/io of their own). A file that cannot be read leaves
 * its *_ok at 0. */
struct stk__host_snap {
  int cpu_ok, io_ok;
  uint64_t busy_ticks, steal_ticks; /* summed over the "cpu" line's fields */
  uint64_t read_bytes;              /* self/io read_bytes */
};
void stk__bench_host_snap(const char *root, struct stk__host_snap *s);
/* The run's figures from two snapshots (cores: online CPUs). */
void stk__bench_host_delta(const struct stk__host_snap *a, const struct stk__host_snap *b,
                           uint32_t cores, struct stk_bench_host *h);

/* Checkpoint emulation (ckpt.c): this process's ranks (o->rank x nacc ..
 * + nacc - 1 of nacc x world) and their files. open computes the files,
 * allocates the buffers, creates the folder and refuses when
 * expected_saves checkpoints would not fit; info (owned by the caller,
 * alive until close) is filled and updated by each save and load, which
 * write or read every file of every rank of this process at once and give
 * the pass's wall time. close removes what the run wrote unless
 * o->keep_checkpoints. */
struct stk__ckpt;
int stk__ckpt_open(struct stk__ckpt **out, const struct stk_bench_opts *o, uint32_t nacc,
                   uint32_t expected_saves, struct stk_bench_ckpt *info, char *err);
int stk__ckpt_save(struct stk__ckpt *c, uint64_t epoch, uint64_t step, double *secs, char *err);
int stk__ckpt_load(struct stk__ckpt *c, uint64_t epoch, uint64_t step, double *secs, char *err);
/* Adds secs (the wait for the job's other processes to finish the same
 * save or load) to the last one's time: under MPI a checkpoint takes until
 * its slowest rank is done. */
void stk__ckpt_extend(struct stk__ckpt *c, int load, double secs);
void stk__ckpt_close(struct stk__ckpt *c);

/* The tensors DLIO puts in file number `file` of rank's files (the order
 * of stk_ckpt_rank_files), bytes each, in the order torch.save writes them
 * (the state's); they add up to the file's bytes. Up to cap go to t; *nt
 * is the count (STK_ERANGE when more than cap). Errors as
 * stk_ckpt_rank_files. */
int stk__ckpt_file_tensors(const struct stk_workload *w, uint32_t ranks, uint32_t rank,
                           size_t file, uint64_t *t, size_t cap, size_t *nt, char *err);

/* --checkpoint-io torch (ckpt_torch.c): one file as torch.save writes it
 * through a Python file, the nt tensors of t[] bytes each lying one after
 * another from state (each CRC-32'd, the XOR of the CRCs to *crcs); and
 * as torch.load reads it (*got: the bytes read, up to the file's end).
 * 0 or an errno. */
int stk__ckpt_torch_write(int fd, const uint64_t *t, size_t nt, const char *state, uint32_t *crcs);
int stk__ckpt_torch_read(int fd, const uint64_t *t, size_t nt, uint64_t *got);
/* n bytes as torch's CPU allocator holds a tensor: posix_memalign at 64
 * bytes, no madvise (small pages where THP is "madvise"); free() it.
 * NULL when out of memory. */
void *stk__ckpt_torch_alloc(uint64_t n);
/* The zip CRC-32 as PyTorch's zip writer computes it (slicing by 16). */
uint32_t stk__ckpt_torch_crc32(uint32_t crc, const void *data, size_t len);

/* Bytes per element of a DLIO data type name ("fp16": 2); 0 if unknown. */
unsigned stk__ckpt_dtype_size(const char *name);
/* stk_workload_load_yaml on a buffer (the fuzz target's entry); name is
 * used in messages. */
/* A caller's bench options and the workload they point at, each read to
 * its struct_size, into *own and *w (own->w = w) (emulate.c); STK_EINVAL
 * naming the struct that is larger than this library's, or no workload. */
int stk__bench_opts_take(struct stk_bench_opts *own, struct stk_workload *w,
                         const struct stk_bench_opts *o, char *err);
/* A caller's workload read to its struct_size (workload.c); STK_EINVAL
 * naming stk_workload when it is larger than this library's. */
int stk__workload_take(struct stk_workload *dst, const struct stk_workload *src, char *err);
int stk__workload_parse_yaml(const char *buf, size_t len, const char *name, struct stk_workload *w,
                             char *unknown, size_t unknown_cap, char *ignored, size_t ignored_cap,
                             char *err);

#endif
