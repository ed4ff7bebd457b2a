/* Clocks, number parsing and byte-size printing. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base.h"

const char *stk_version(void) { return STOKER_VERSION; }

void stk__boot_id(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return;
  if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
  fclose(f);
}

uint64_t stk_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t stk_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void stk_sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int stk_parse_u64(const char *s, uint64_t *out) {
  if (!s || *s < '0' || *s > '9') return STK_EINVAL;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end != '\0') return STK_EINVAL;
  if (errno == ERANGE) return STK_ERANGE;
  *out = v;
  return 0;
}

int stk_parse_double(const char *s, double *out) {
  if (!s || !*s) return STK_EINVAL;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end != '\0' || !isfinite(v) || errno == ERANGE) return STK_EINVAL;
  *out = v;
  return 0;
}

/* Units of stk_parse_size: powers of 1024 with or without "iB" (as
 * stk_fmt_bytes prints them), powers of 1000 for "kB".."EB". */
static const struct {
  const char *suffix;
  uint64_t mult;
} size_units[] = {
    {"", 1},          {"b", 1},
    {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
    {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
    {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
    {"p", 1ull << 50}, {"pib", 1ull << 50}, {"pb", 1000000000000000ull},
    {"e", 1ull << 60}, {"eib", 1ull << 60}, {"eb", 1000000000000000000ull},
};

/* Exact decimal arithmetic (no double): "1.5GiB" is 1.5 * 2^30 bytes
 * exactly, a fraction that leaves part of a byte is refused, and anything
 * past 2^64 - 1 is STK_ERANGE rather than wrapped or rounded. */
int stk_parse_size(const char *s, uint64_t *out) {
  if (!s) return STK_EINVAL;
  const char *p = s;
  unsigned __int128 whole = 0, frac = 0, scale = 1;
  int digits = 0, big = 0;
  for (; *p >= '0' && *p <= '9'; p++, digits++) {
    whole = whole * 10 + (unsigned)(*p - '0');
    if (whole > UINT64_MAX) big = 1, whole = (unsigned __int128)UINT64_MAX + 1;
  }
  if (*p == '.') {
    for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
      if (scale > 1000000000000000000ull) {
        if (*p != '0') return STK_EINVAL; /* finer than any unit's byte */
        continue;
      }
      frac = frac * 10 + (unsigned)(*p - '0');
      scale *= 10;
    }
  }
  if (!digits) return STK_EINVAL;
  while (*p == ' ') p++; /* "1.50 GiB", as stk_fmt_bytes prints it */
  for (size_t i = 0; i < STK__ARRAY_LEN(size_units); i++) {
    if (strcasecmp(p, size_units[i].suffix) != 0) continue;
    unsigned __int128 m = size_units[i].mult, fb = frac * m;
    if (fb % scale) return STK_EINVAL; /* "1.3" bytes is not a size */
    if (big) return STK_ERANGE;
    unsigned __int128 r = whole * m + fb / scale;
    if (r > UINT64_MAX) return STK_ERANGE;
    *out = (uint64_t)r;
    return 0;
  }
  return STK_EINVAL;
}

char *stk_fmt_bytes(uint64_t b, char *buf, size_t n) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024.0 && i < 6) {
    v /= 1024.0;
    i++;
  }
  if (i == 0)
    snprintf(buf, n, "%llu B", (unsigned long long)b);
  else
    snprintf(buf, n, "%.2f %s", v, u[i]);
  return buf;
}

void stk_csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fprintf(f, "%s,", s);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputs("\",", f);
}
