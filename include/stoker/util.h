/* Small utilities that the CLI and library users share with the library:
 * clocks, size parsing and printing, a seeded RNG, a streaming JSON writer,
 * CRC32C and logging. All are thread-safe unless a handle is shared. */
#ifndef STOKER_UTIL_H
#define STOKER_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stoker/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STOKER_VERSION "0.1.0"

/* Version string of the library ("0.1.0"); static. */
STK_EXPORT const char *stk_version(void);

/* One CSV field and its comma: quoted (RFC 4180, quotes doubled) when it
 * holds a comma, a quote or a line break, as it was read; else as is. */
STK_EXPORT void stk_csv_field(FILE *f, const char *s);

/* ---- clocks ---------------------------------------------------------- */

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
STK_EXPORT uint64_t stk_now_ns(void);
/* CPU time consumed by the whole process, in nanoseconds. */
STK_EXPORT uint64_t stk_cpu_ns(void);
/* Sleep for ns nanoseconds; resumes after signals. */
STK_EXPORT void stk_sleep_ns(uint64_t ns);

/* ---- parsing and printing -------------------------------------------- */

/* Parse a byte size: "4096", "128KiB", "128K", "1.5GiB", "2MB", "1PiB",
 * "1.50 GiB" (powers of 1024 for K/M/G/T/P/E with or without "iB", as
 * stk_fmt_bytes prints them; powers of 1000 for "kB" to "EB"; case does not
 * matter; spaces may separate number and unit). Computed exactly: returns
 * 0 and sets *out, STK_EINVAL for text that is not a whole number of bytes
 * ("1.3", "12 apples", "-1", "1e3") and STK_ERANGE for a size past
 * 2^64 - 1 bytes (16 EiB). */
STK_EXPORT int stk_parse_size(const char *s, uint64_t *out);
/* Parse a whole decimal unsigned integer; same returns as stk_parse_size. */
STK_EXPORT int stk_parse_u64(const char *s, uint64_t *out);
/* Parse a whole finite floating-point number; STK_EINVAL otherwise. */
STK_EXPORT int stk_parse_double(const char *s, double *out);
/* Print a byte count as "1.50 GiB" (B, KiB .. EiB) into buf (at least 16
 * bytes); returns buf. stk_parse_size reads what it prints. */
STK_EXPORT char *stk_fmt_bytes(uint64_t bytes, char *buf, size_t n);

/* ---- random numbers -------------------------------------------------- */

/* xoshiro256** seeded through splitmix64: fast, and the same stream for the
 * same seed on every machine. Not for cryptography. */
struct stk_rng {
  uint64_t s[4];
};
STK_EXPORT void stk_rng_seed(struct stk_rng *r, uint64_t seed);
STK_EXPORT uint64_t stk_rng_next(struct stk_rng *r);
/* Fill buf with n bytes of the stream: exactly the bytes of repeated
 * stk_rng_next() calls, each stored little-endian (8 bytes a draw), the
 * last n % 8 bytes being the low bytes of one more draw. Much faster than
 * the calls (the state stays in registers). n may be 0; buf any alignment. */
STK_EXPORT void stk_rng_fill(struct stk_rng *r, void *buf, size_t n);
/* Uniform integer in [0, bound) without modulo bias; bound > 0. */
STK_EXPORT uint64_t stk_rng_below(struct stk_rng *r, uint64_t bound);
/* Uniform double in [0, 1). */
STK_EXPORT double stk_rng_double(struct stk_rng *r);
/* Standard normal deviate (Box-Muller). */
STK_EXPORT double stk_rng_normal(struct stk_rng *r);
/* Mix two 64-bit values into one well-spread seed (for per-epoch streams). */
STK_EXPORT uint64_t stk_mix64(uint64_t a, uint64_t b);

/* ---- CRC32C (Castagnoli) --------------------------------------------- */

/* Extend crc over len bytes (start with crc = 0). Uses the SSE4.2 crc32
 * instruction when the CPU has it, a table otherwise; same result. */
STK_EXPORT uint32_t stk_crc32c(uint32_t crc, const void *data, size_t len);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
STK_EXPORT uint32_t stk_crc32c_mask(uint32_t crc);

/* ---- JSON writer ----------------------------------------------------- */

/* Streams well-formed JSON to a FILE; commas and nesting are handled by the
 * writer. Strings are escaped. Non-finite doubles are written as null, since
 * JSON has no NaN: a figure that could not be measured is null, never 0. */
#define STK_JSON_MAX_DEPTH 32
struct stk_json {
  FILE *f;
  int depth;
  int indent;                          /* 0 = compact, else spaces per level */
  unsigned char first[STK_JSON_MAX_DEPTH]; /* no member written yet at depth */
  int after_key;
};
STK_EXPORT void stk_json_init(struct stk_json *j, FILE *f, int indent);
STK_EXPORT void stk_json_obj_begin(struct stk_json *j);
STK_EXPORT void stk_json_obj_end(struct stk_json *j);
STK_EXPORT void stk_json_arr_begin(struct stk_json *j);
STK_EXPORT void stk_json_arr_end(struct stk_json *j);
STK_EXPORT void stk_json_key(struct stk_json *j, const char *key);
STK_EXPORT void stk_json_str(struct stk_json *j, const char *s);
STK_EXPORT void stk_json_u64(struct stk_json *j, uint64_t v);
STK_EXPORT void stk_json_i64(struct stk_json *j, int64_t v);
STK_EXPORT void stk_json_dbl(struct stk_json *j, double v);
STK_EXPORT void stk_json_bool(struct stk_json *j, int v);
STK_EXPORT void stk_json_null(struct stk_json *j);
/* Convenience: key followed by a value. */
STK_EXPORT void stk_json_kstr(struct stk_json *j, const char *k, const char *s);
STK_EXPORT void stk_json_ku64(struct stk_json *j, const char *k, uint64_t v);
STK_EXPORT void stk_json_kdbl(struct stk_json *j, const char *k, double v);

/* ---- output files ---------------------------------------------------- */

/* A report, JSON, SVG, CSV or state file that appears whole or not at all:
 * writes go to a temporary file beside PATH (".NAME.PID-TAG.tmp"), which
 * stk_outfile_commit flushes, fsyncs and renames over PATH only when every
 * write succeeded. A file replaced keeps its permissions; a symlink at PATH
 * is written through (its file replaced, the link kept). PATH "-" is stdout
 * (commit then only checks that stdout took the bytes). Use one handle from
 * one thread. */
struct stk_outfile;
/* Whether PATH can be written, without creating anything: its directory
 * exists and is writable and PATH is not a directory ("-" always can).
 * Call it before a long run so a typo fails at once. 0, or a code with a
 * sentence naming PATH in err (STK_ERRMSG_MAX bytes, may be NULL). */
STK_EXPORT int stk_outfile_check(const char *path, char *err);
/* Start writing PATH: *out is the handle, or NULL on failure (err set). */
STK_EXPORT int stk_outfile_open(struct stk_outfile **out, const char *path, char *err);
/* The stream to write to; owned by the handle (do not fclose it). */
STK_EXPORT FILE *stk_outfile_stream(struct stk_outfile *o);
/* The PATH the handle was opened for. */
STK_EXPORT const char *stk_outfile_path(const struct stk_outfile *o);
/* Finish: 0 when PATH now holds everything written; otherwise a code with
 * err naming PATH and the cause (a full disk, a size limit), the temporary
 * removed and PATH left as it was. Frees o either way. */
STK_EXPORT int stk_outfile_commit(struct stk_outfile *o, char *err);
/* Give up: remove the temporary, leave PATH as it was, free o. NULL is a
 * no-op. */
STK_EXPORT void stk_outfile_abort(struct stk_outfile *o);

/* ---- logging --------------------------------------------------------- */

enum stk_log_level { STK_LOG_ERROR, STK_LOG_WARN, STK_LOG_INFO, STK_LOG_DEBUG };
/* The process-wide log level registry; initial level is WARN, or the value
 * of STOKER_LOG (error|warn|info|debug) at first use. */
STK_EXPORT void stk_log_set_level(enum stk_log_level lvl);
STK_EXPORT enum stk_log_level stk_log_get_level(void);
/* A host program's log sink in place of stderr (the Python binding routes
 * it to the logging module). fn gets the level and the message (one line,
 * without the "stoker: level: " prefix or a newline) for every message at
 * or above the level; it may be called from any of the library's threads,
 * several at once, so it must be thread-safe and must not call back into
 * the loader. fn NULL restores stderr. Set it before opening loaders. */
typedef void (*stk_log_fn)(void *ctx, enum stk_log_level lvl, const char *msg);
STK_EXPORT void stk_log_set_callback(stk_log_fn fn, void *ctx);
STK_EXPORT void stk_log(enum stk_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
