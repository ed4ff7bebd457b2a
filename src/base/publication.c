/* The loader publication's shared pieces (struct stk_pub,
 * stoker/publication.h): where the files live, how a reader takes a
 * consistent, checked copy of one while its writer runs, and which process
 * wrote it. The loader writes (src/loader/publish.c) and the metrics agent
 * reads (src/agent); both stand on base, so neither includes the other. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "publication.h"
#include "stoker/publication.h"

_Static_assert(sizeof(struct stk_pub) == STK_PUB_SIZE, "stk_pub layout");
_Static_assert(offsetof(struct stk_pub, stage) == 192, "stk_pub layout");
_Static_assert(offsetof(struct stk_pub, minor) == 152, "stk_pub layout");
_Static_assert(offsetof(struct stk_pub, job) == 448, "stk_pub layout");
_Static_assert(STK_PUB_SIZE_MAX % 8 == 0 && STK_PUB_SIZE_MAX >= STK_PUB_SIZE, "stk_pub bounds");

const char *const stk__pub_status_names[STK__PUB_NSTATUS] = {"ok",      "new",  "size", "format",
                                                             "version", "busy", "io"};

uint64_t stk__pid_start_ticks(const char *proc_root, long pid) {
  char path[600], buf[1024];
  snprintf(path, sizeof path, "%s/%ld/stat", proc_root, pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  /* Fields after the command name, which may hold spaces and ')'. */
  char *s = strrchr(buf, ')');
  if (!s) return 0;
  s++;
  for (int field = 3; field < 22 && s; field++) s = strchr(s + 1, ' ');
  return s ? strtoull(s + 1, NULL, 10) : 0;
}

const char *stk__runtime_dir(char *buf, size_t n) {
  const char *d = getenv("STOKER_RUNTIME_DIR");
  snprintf(buf, n, "%s", d && *d ? d : "/dev/shm/stoker");
  return buf;
}

/* Job ids and stage names become label values: the characters a job id
 * may hold, anything else '_'. */
static void clean_word(char *s, size_t n) {
  s[n - 1] = 0;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-' || c == ':' || c == '/' || c == '@';
    if (!ok) *s = '_';
  }
}

/* Length of the valid UTF-8 sequence of two to four bytes at s (not an
 * overlong form, a surrogate or past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  size_t n = 0;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4;
  for (size_t i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
      (c == 0xf4 && s[1] > 0x8f))
    return 0;
  return n;
}

/* Free text (the dataset): printable ASCII and valid UTF-8; else '?'. */
static void clean_text(char *s, size_t n) {
  s[n - 1] = 0;
  unsigned char *p = (unsigned char *)s;
  while (*p) {
    size_t l = *p >= 0x80 ? utf8_len(p) : 0;
    if (l) {
      p += l;
      continue;
    }
    if (*p < 0x20 || *p >= 0x7f) *p = '?';
    p++;
  }
}

int stk__pub_parse(const void *buf, size_t n, struct stk_pub *out) {
  static const char zero[8];
  const unsigned char *b = buf;
  if (n == 0 || (n >= 8 && !memcmp(b, zero, 8))) return STK__PUB_NEW;
  if (n < 16) return STK__PUB_SIZE;
  if (memcmp(b, STK_PUB_MAGIC, 8)) return STK__PUB_FORMAT;
  uint32_t version, size;
  memcpy(&version, b + offsetof(struct stk_pub, version), 4);
  memcpy(&size, b + offsetof(struct stk_pub, size), 4);
  if (version != STK_PUB_VERSION) return STK__PUB_VERSION;
  if (size < STK_PUB_SIZE || size > STK_PUB_SIZE_MAX || size % 8 || size != n) return STK__PUB_SIZE;
  uint64_t seq;
  memcpy(&seq, b + offsetof(struct stk_pub, seq), 8);
  if (seq & 1) return STK__PUB_BUSY;
  /* A newer minor's bytes past STK_PUB_SIZE are not this reader's. */
  memcpy(out, b, STK_PUB_SIZE);
  clean_word(out->job, sizeof out->job);
  clean_text(out->dataset, sizeof out->dataset);
  for (int i = 0; i < STK_PUB_STAGES; i++)
    clean_word(out->stage[i].name, sizeof out->stage[i].name);
  return STK__PUB_OK;
}

static ssize_t pread_full(int fd, void *buf, size_t n, off_t off) {
  for (;;) {
    ssize_t r = pread(fd, buf, n, off);
    if (r >= 0 || errno != EINTR) return r;
  }
}

int stk__pub_read_fd(int fd, struct stk_pub *out) {
  /* One byte more than the largest file: a file grown past it shows. */
  _Alignas(8) unsigned char buf[STK_PUB_SIZE_MAX + 8];
  const off_t seq_at = offsetof(struct stk_pub, seq);
  /* A writer holds the lock for well under a microsecond, at most 20
   * times a second: a few tries find it free. More only cost the reader
   * (three system calls each) when a writer flips seq on purpose. */
  for (int tries = 0; tries < 20; tries++) {
    /* Sequence lock, by copies: seq before the copy, the copy (whose own
     * seq must agree), seq after it. Each pread is a system call, which
     * orders it against the others on this side; the writer's release
     * stores order its side. */
    uint64_t s1, s2, sc;
    ssize_t r = pread_full(fd, &s1, 8, seq_at);
    if (r < 0) return STK__PUB_IO;
    ssize_t len = pread_full(fd, buf, STK_PUB_SIZE_MAX + 1, 0);
    if (len < 0) return STK__PUB_IO;
    if (r != 8) return stk__pub_parse(buf, (size_t)len, out); /* too short for seq: says why */
    struct stk_pub tmp;
    int st = stk__pub_parse(buf, (size_t)len, &tmp);
    if (st == STK__PUB_BUSY) continue;
    if (st != STK__PUB_OK) return st;
    r = pread_full(fd, &s2, 8, seq_at);
    if (r < 0) return STK__PUB_IO;
    if (r != 8) return STK__PUB_SIZE; /* truncated meanwhile */
    sc = tmp.seq;
    if (s1 == s2 && sc == s1) {
      memcpy(out, &tmp, sizeof tmp);
      return STK__PUB_OK;
    }
  }
  return STK__PUB_BUSY;
}
