/* The test framework: TEST(name) defines a test (the Makefile collects the
 * names into the registry), CHECK* assert, SKIP ends a test as skipped.
 * Every test runs in its own process, in a fresh empty directory that is
 * its working directory, with a timeout. */
#ifndef STOKER_TEST_H
#define STOKER_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST(name) void test_##name(void)

void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
void test_skip(const char *why) __attribute__((noreturn));

#define CHECK(c) \
  do { if (!(c)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #c); } while (0)
#define CHECK_MSG(c, ...) \
  do { if (!(c)) test_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    long long a_ = (long long)(a), b_ = (long long)(b);                                 \
    if (a_ != b_) test_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b, a_, b_); \
  } while (0)
#define CHECK_OK(call)                                                           \
  do {                                                                           \
    int rc_ = (call);                                                            \
    if (rc_ != 0) test_fail(__FILE__, __LINE__, "%s returned %d", #call, rc_); \
  } while (0)
#define CHECK_STR(a, b)                                                                      \
  do {                                                                                       \
    const char *a_ = (a), *b_ = (b);                                                         \
    if (strcmp(a_, b_) != 0) test_fail(__FILE__, __LINE__, "\"%s\" == \"%s\"", a_, b_);      \
  } while (0)
#define CHECK_CONTAINS(hay, needle)                                                          \
  do {                                                                                       \
    const char *h_ = (hay), *n_ = (needle);                                                  \
    if (!h_ || !strstr(h_, n_)) test_fail(__FILE__, __LINE__, "'%s' in: %s", n_, h_ ? h_ : "(null)"); \
  } while (0)
#define SKIP(why) test_skip(why)

/* Path of the built stoker CLI (from STOKER_BIN). */
const char *test_stoker_bin(void);
/* Run a shell command in the test's directory; stdout+stderr are captured
 * into a malloc'ed string the caller frees. Returns the exit status. */
int test_sh(char **output, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Directory of the shared read-only data (../shared/data from the project
 * root), or NULL when absent. */
const char *test_shared_data(void);
/* Write len bytes to path; read a whole file (caller frees). */
void test_write_file(const char *path, const void *data, size_t len);

/* A growing byte buffer for the tests' independent writers (file formats
 * laid out by hand): test_buf_put appends bytes, test_buf_le an unsigned
 * value little-endian in `bytes` bytes whatever the host; free(b->p) after. */
struct test_buf {
  uint8_t *p;
  size_t n, cap;
};
void test_buf_put(struct test_buf *b, const void *p, size_t n);
void test_buf_le(struct test_buf *b, uint64_t v, int bytes);
/* The little-endian unsigned value of `bytes` bytes at p. */
uint64_t test_ld_le(const uint8_t *p, int bytes);
uint8_t *test_read_file(const char *path, size_t *len);

#endif
