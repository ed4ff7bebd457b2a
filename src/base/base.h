/* Internal helpers of src/base shared by every subsystem: error detail
 * formatting, errno mapping, checked allocation and file helpers. Nothing
 * here is part of the public API. */
#ifndef STOKER_BASE_H
#define STOKER_BASE_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/error.h"
#include "stoker/util.h"

#define STK__MIN(a, b) ((a) < (b) ? (a) : (b))
#define STK__MAX(a, b) ((a) > (b) ? (a) : (b))
#define STK__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Format a detail message into buf (STK_ERRMSG_MAX bytes) and return code,
 * so failure paths read `return stk__errf(h->err, STK_ECRC, "...", ...)`.
 * buf may be NULL, in which case only the code is returned. */
int stk__errf(char *buf, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Options structs with a leading size_t struct_size (opts.c): init zeroes
 * the first min(have, size) bytes of o (have: this library's sizeof) and
 * records size; take copies the caller's src (struct_size bytes, 0 = this
 * header's; src NULL = all defaults) into dst (have bytes, zeroed past
 * what the caller has, struct_size set to have), and refuses a struct_size
 * larger than have or too small to hold itself, naming what. */
void stk__opts_init(void *o, size_t have, size_t size);
int stk__opts_take(void *dst, size_t have, const void *src, const char *what, char *err);
/* Results with a leading size_t struct_size that the caller sets (0 = this
 * header's): copy the library's full result (have bytes) into out, no
 * further than out's struct_size, which stays as the caller set it (a
 * newer caller's larger struct gets what this library knows; the rest is
 * left as it was). */
void stk__result_give(void *out, const void *full, size_t have);
/* A result the caller hands back (to print it, say): copied into dst
 * (have bytes) no further than src's struct_size, zeros past it; a larger
 * src gives what this library knows. */
void stk__result_take(void *dst, size_t have, const void *src);

/* Map an errno value to the closest STK_E* code. */
int stk__from_errno(int errnum);

/* Read exactly len bytes at off, retrying short reads and EINTR. Returns 0,
 * STK_ETRUNC when the file ends first, or a mapped errno code. */
int stk__pread_full(int fd, void *buf, size_t len, uint64_t off);
/* Write all of buf, retrying short writes and EINTR. */
int stk__write_full(int fd, const void *buf, size_t len);
/* This boot's id ("unknown" when the kernel does not say): what a check
 * recorded beside a file is trusted for (the cache's entries, index files). */
void stk__boot_id(char *out, size_t n);

/* The zip/gzip CRC-32 (crc.c; stk_crc32c is the public CRC32C): zlib's
 * convention, 0 to start, the result of one call chains into the next. */
uint32_t stk__crc32(uint32_t crc, const void *data, size_t len);
/* Copy len bytes from src to dst (not overlapping) and return
 * stk_crc32c(crc, src, len), in one pass over the bytes (crc_copy.c). */
uint32_t stk__crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);

/* Little-endian loads and stores, alignment-free. */
static inline uint16_t stk__ld16(const void *p) {
  const uint8_t *b = p;
  return (uint16_t)(b[0] | (b[1] << 8));
}
static inline uint32_t stk__ld32(const void *p) {
  const uint8_t *b = p;
  return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
static inline uint64_t stk__ld64(const void *p) {
  const uint8_t *b = p;
  return (uint64_t)stk__ld32(b) | ((uint64_t)stk__ld32(b + 4) << 32);
}
static inline void stk__st16(void *p, uint16_t v) {
  uint8_t *b = p;
  b[0] = (uint8_t)v;
  b[1] = (uint8_t)(v >> 8);
}
static inline void stk__st32(void *p, uint32_t v) {
  uint8_t *b = p;
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline void stk__st64(void *p, uint64_t v) {
  stk__st32(p, (uint32_t)v);
  stk__st32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* Latency histogram (loader waits, cache fetches): log-linear buckets, about 3% wide,
 * from 1 µs to hours, so p50/p99 cost fixed memory however long the run. */
#define STK_HIST_SUB 32
#define STK_HIST_GROUPS 40
struct stk_hist {
  uint64_t count;
  uint64_t max;
  uint64_t b[STK_HIST_GROUPS * STK_HIST_SUB];
};
void stk__hist_add(struct stk_hist *h, uint64_t ns);
uint64_t stk__hist_quantile(const struct stk_hist *h, double q);

#endif
