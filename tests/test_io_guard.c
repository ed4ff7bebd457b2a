/* The mapcopy engine's bus-error guard (src/io/guard.c) and the engine on
 * files that change size under it: a file truncated after it was mapped is
 * an error for the request, never the end of the process; a bus error
 * outside a guarded copy still ends it; a file that grew is read whole. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/io/io.h"
#include "test.h"

#define PG 4096u

static void write_file(const char *path, size_t n, uint8_t seed) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  uint8_t buf[PG];
  for (size_t at = 0; at < n; at += sizeof buf) {
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(seed + (at + i) * 7);
    size_t k = n - at < sizeof buf ? n - at : sizeof buf;
    CHECK(write(fd, buf, k) == (ssize_t)k);
  }
  close(fd);
}

/* A mapping of 16 pages whose file was then cut to 4: a guarded copy of
 * the lost pages is STK_ETRUNC, twice (the handler leaves SIGBUS usable
 * for the next), and a copy of the pages still there gives their bytes. */
TEST(io_guard_truncated_mapping_is_an_error) {
  CHECK(stk__io_guard_ready());
  write_file("f", 16 * PG, 3);
  int fd = open("f", O_RDONLY);
  CHECK(fd >= 0);
  uint8_t *m = mmap(NULL, 16 * PG, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(m != MAP_FAILED);
  CHECK(truncate("f", 4 * PG) == 0);
  static uint8_t buf[16 * PG];
  struct stk_io_req r = {.fd = fd, .len = 16 * PG, .buf = buf};
  for (int k = 0; k < 2; k++) CHECK_EQ(stk__io_guarded_copy(&r, m, 16 * PG), STK_ETRUNC);
  CHECK_EQ(stk__io_guarded_copy(&r, m, 4 * PG), 0);
  for (size_t i = 0; i < 4 * PG; i++) CHECK_EQ(buf[i], (uint8_t)(3 + i * 7));
  CHECK(stk__io_guard_ready()); /* still the installed handler */
  munmap(m, 16 * PG);
  close(fd);
}

/* In a child: set_up its SIGBUS action, open the guard, then read a page
 * a truncation took away, outside any copy. The child must end with
 * SIGBUS, as it would without the guard. */
static void bus_error_outside_a_copy(void (*set_up)(void)) {
  write_file("f", 16 * PG, 3);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    set_up();
    if (!stk__io_guard_ready()) _exit(3);
    int fd = open("f", O_RDONLY);
    volatile uint8_t *m = mmap(NULL, 16 * PG, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED || truncate("f", 4 * PG) != 0) _exit(4);
    uint8_t c = m[8 * PG];
    (void)c;
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "child status 0x%x", st);
}

/* a sanitizer's handler would report it and exit 1 */
static void default_action(void) { signal(SIGBUS, SIG_DFL); }

/* A bus error that is not a guarded copy's (here: a read of the same lost
 * page outside one) goes on to the handler that was there before, the
 * default here, which ends the process with SIGBUS as it always did. */
TEST(io_guard_other_bus_errors_still_end_the_process) { bus_error_outside_a_copy(default_action); }

static void returns_once(int sig, siginfo_t *si, void *uc) { (void)sig, (void)si, (void)uc; }

/* A SA_SIGINFO | SA_RESETHAND handler, run once. */
static void reset_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = returns_once;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, NULL) != 0) _exit(5);
  raise(SIGBUS); /* runs returns_once, which resets the action */
}

/* A SA_RESETHAND handler that already ran is SIG_DFL with SA_SIGINFO
 * still set: the guard must end the process with SIGBUS as the default
 * would, not call a null handler (SIGSEGV). */
TEST(io_guard_chains_to_a_reset_handler_as_default) { bus_error_outside_a_copy(reset_handler); }

/* One request through an open engine; its res. */
static int read_one(const struct stk_io_ops *ops, struct stk_io *io, int fd, uint64_t off,
                    uint64_t len, uint8_t *buf) {
  struct stk_io_req r = {.fd = fd, .off = off, .len = len, .buf = buf};
  CHECK_OK(ops->submit(io, &r));
  struct stk_io_req *done;
  CHECK_EQ(ops->reap(io, &done, 1, 1), 1);
  CHECK(done == &r);
  return r.res;
}

/* The engine keeps a file mapped across requests: a file that grew since
 * is mapped again and its new bytes read; one cut short since is
 * STK_ETRUNC for a read past its new end, and its first pages still read. */
TEST(io_mapcopy_file_grows_and_shrinks) {
  const struct stk_io_ops *ops = &stk__io_mapcopy;
  struct stk_io *io;
  struct stk_io_opts o = {.depth = 4, .threads = 2};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(ops->open(&io, &o, err));
  write_file("f", 4 * PG, 5);
  int fd = open("f", O_RDWR);
  CHECK(fd >= 0);
  static uint8_t buf[8 * PG];
  CHECK_EQ(read_one(ops, io, fd, 0, 4 * PG, buf), 0);
  /* Grow it to 8 pages, the new ones with other bytes. */
  uint8_t page[PG];
  for (uint32_t p = 4; p < 8; p++) {
    memset(page, (int)p, sizeof page);
    CHECK(pwrite(fd, page, PG, (off_t)p * PG) == PG);
  }
  CHECK_EQ(read_one(ops, io, fd, 2 * PG, 6 * PG, buf), 0);
  for (size_t i = 0; i < 2 * PG; i++) CHECK_EQ(buf[i], (uint8_t)(5 + (2 * PG + i) * 7));
  for (size_t i = 2 * PG; i < 6 * PG; i++) CHECK_EQ(buf[i], (uint8_t)(i / PG + 2));
  CHECK(ftruncate(fd, 3 * PG) == 0);
  CHECK_EQ(read_one(ops, io, fd, 2 * PG, 6 * PG, buf), STK_ETRUNC);
  CHECK_EQ(read_one(ops, io, fd, 0, 2 * PG, buf), 0);
  CHECK_EQ(buf[PG + 1], (uint8_t)(5 + (PG + 1) * 7));
  ops->close(io);
  close(fd);
}

/* A thread that starts with SIGBUS blocked (its creator's mask) would be
 * killed by the fault whatever the handler: the guard unblocks it. */
static void *copy_blocked(void *arg) {
  int *rc = arg;
  int fd = open("f", O_RDONLY);
  uint8_t *m = mmap(NULL, 16 * PG, PROT_READ, MAP_SHARED, fd, 0);
  static uint8_t buf[16 * PG];
  struct stk_io_req r = {.fd = fd, .len = 16 * PG, .buf = buf};
  *rc = m == MAP_FAILED || truncate("f", 4 * PG) != 0 ? -1 : stk__io_guarded_copy(&r, m, 16 * PG);
  close(fd);
  return NULL;
}

TEST(io_guard_thread_with_sigbus_blocked) {
  CHECK(stk__io_guard_ready());
  write_file("f", 16 * PG, 3);
  sigset_t s, old;
  sigemptyset(&s);
  sigaddset(&s, SIGBUS);
  pthread_sigmask(SIG_BLOCK, &s, &old);
  pthread_t t;
  int rc = 1;
  CHECK(pthread_create(&t, NULL, copy_blocked, &rc) == 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_EQ(rc, STK_ETRUNC);
}
