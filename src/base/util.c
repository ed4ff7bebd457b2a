/* Clocks, number parsing and byte-size printing. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base.h"

const char *stk_version(void) { return STOKER_VERSION; }

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

int stk_parse_size(const char *s, uint64_t *out) {
  if (!s || !((*s >= '0' && *s <= '9') || *s == '.')) return STK_EINVAL;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || !isfinite(v) || v < 0) return STK_EINVAL;
  static const struct {
    const char *suffix;
    double mult;
  } units[] = {
      {"", 1},           {"b", 1},          {"k", 1024.0},     {"kib", 1024.0},
      {"kb", 1e3},       {"m", 1048576.0},  {"mib", 1048576.0}, {"mb", 1e6},
      {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
      {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
  };
  for (size_t i = 0; i < STK__ARRAY_LEN(units); i++) {
    if (strcasecmp(end, units[i].suffix) == 0) {
      double r = v * units[i].mult;
      if (r >= 18446744073709551615.0) return STK_ERANGE;
      if (r != floor(r)) return STK_EINVAL; /* "1.3" bytes is not a size */
      *out = (uint64_t)r;
      return 0;
    }
  }
  return STK_EINVAL;
}

char *stk_fmt_bytes(uint64_t b, char *buf, size_t n) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024.0 && i < 5) {
    v /= 1024.0;
    i++;
  }
  if (i == 0)
    snprintf(buf, n, "%llu B", (unsigned long long)b);
  else
    snprintf(buf, n, "%.2f %s", v, u[i]);
  return buf;
}
