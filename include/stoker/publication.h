/* The loader publication format: the contract between the programs that
 * publish a loader's counters (stoker's C loader, the Python binding, any
 * other loader) and the metrics agents that read them (`stoker watch`),
 * which may be of different stoker versions. Only the format lives here; a
 * publisher needs nothing else from libstoker. docs/watch.md shows the same
 * layout as a table.
 *
 * The file. Each running loader keeps one file named "loader-PID-N.pub" in
 * the runtime directory ($STOKER_RUNTIME_DIR, else /dev/shm/stoker, mode
 * 1777 like /tmp), created with O_EXCL by the publishing process itself,
 * sized once to `size` bytes, mapped shared and removed at close. Integers
 * are in the host's byte order; strings are NUL-terminated and written once,
 * before the magic. The magic is written last (a release store), so a reader
 * never takes a half-made file for a publication. STOKER_PUBLISH=0 turns
 * the C loader's publication off.
 *
 * Counters are written under a sequence lock: the writer makes seq odd,
 * writes, then makes it even again; a reader copies the file and retries
 * while seq was odd or changed. Readers copy (pread), never map: a file in
 * a directory every user can write is untrusted input, and a mapping of it
 * can be truncated under the reader (a bus error).
 *
 * Whom a publication speaks for. A file speaks only for the process named
 * by `pid` (with `pid_start_ticks`, field 22 of /proc/PID/stat, so that a
 * reused pid is not taken for the publisher), and only if the file's owner
 * (its st_uid) is one of that process's user ids (real, effective, saved,
 * file system: /proc/PID/status "Uid:"). A reader ignores and counts a file
 * that names a process of another user.
 *
 * The version rule. `version` is the major version; `minor` (at offset 152,
 * zero in files written before minors existed) the minor one. A reader
 *  - skips (and counts) a file whose major version is not one it knows: a
 *    new major may change anything after `size`;
 *  - reads a file of a newer minor of its major as the minor it knows: a
 *    minor only gives meaning to bytes that were reserved (zero) before or
 *    appends fields after the old end, growing `size`; it never moves,
 *    resizes or redefines a field. A field a minor added reads as absent in
 *    files of an older minor (a reader compares `minor` before using it);
 *  - checks `size`: at least STK_PUB_SIZE (version 1.0's layout), at most
 *    STK_PUB_SIZE_MAX, a multiple of 8, and equal to the file's length. A
 *    file of another length (truncated, grown, still being made) is not
 *    read.
 * A writer writes the newest minor it knows and zeroes every byte it does
 * not define. */
#ifndef STOKER_PUBLICATION_H
#define STOKER_PUBLICATION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STK_PUB_MAGIC "STKLOAD\0"
#define STK_PUB_VERSION 1u     /* the major version this header describes */
#define STK_PUB_MINOR 0u       /* ... and its newest minor version */
#define STK_PUB_SIZE 1024u     /* size of struct stk_pub: version 1.0's file */
#define STK_PUB_SIZE_MAX 4096u /* no minor of version 1 grows past one page */
#define STK_PUB_STAGES 4
#define STK_PUB_CLOSED 1u      /* flags: the loader has closed (final counters) */

struct stk_pub_stage {
  char name[16];         /* "read", "decode", "batch", "ring" */
  uint64_t busy_ns;      /* summed over the stage's threads */
  uint64_t wait_in_ns;   /* blocked waiting for input */
  uint64_t wait_out_ns;  /* blocked because the next stage was full */
  uint64_t items, bytes;
  uint32_t threads, pad;
};

struct stk_pub {
  char magic[8];                  /*   0 STK_PUB_MAGIC */
  uint32_t version;               /*   8 major: STK_PUB_VERSION */
  uint32_t size;                  /*  12 bytes in the file: STK_PUB_SIZE or more */
  uint64_t seq;                   /*  16 sequence lock */
  uint32_t pid;                   /*  24 the publishing process */
  uint32_t flags;                 /*  28 STK_PUB_CLOSED */
  uint64_t pid_start_ticks;       /*  32 field 22 of /proc/PID/stat */
  uint64_t open_unix_ns;          /*  40 when the loader opened */
  uint64_t update_unix_ns;        /*  48 last counter update */
  uint64_t wall_ns;               /*  56 since open */
  uint64_t batches, samples;      /*  64 delivered to the consumer */
  uint64_t bytes, skipped;        /*  80 */
  uint64_t consumer_wait_ns;      /*  96 total time the consumer waited */
  uint64_t waiting_since_unix_ns; /* 104 the consumer is waiting since; 0 not */
  uint64_t cache_hits;            /* 112 reads served from a cache tier */
  uint64_t cache_misses;          /* 120 reads that waited for the origin */
  uint64_t cache_fetch_bytes;     /* 128 bytes fetched from the origin */
  uint64_t ring_depth;            /* 136 prefetch ring depth now */
  uint64_t mem_bytes;             /* 144 batch buffers allocated */
  uint32_t minor;                 /* 152 minor version: STK_PUB_MINOR */
  uint32_t reserved32;            /* 156 zero */
  uint64_t reserved[4];           /* 160 zero */
  struct stk_pub_stage stage[STK_PUB_STAGES]; /* 192 */
  char job[64];                   /* 448 job id from the environment, or "" */
  char dataset[512];              /* 512 the dataset's root or URL */
};

#ifdef __cplusplus
}
#endif
#endif
