/* Copies out of a file mapping that a bus error cannot kill. A read of a
 * mapped page past the file's end (the file was truncated after it was
 * mapped) or of a page the device fails to read raises SIGBUS, which ends
 * the process; pread would return a short read or EIO instead. The
 * mapcopy engine makes each copy under a guard: the thread notes the
 * source range it is reading and a sigsetjmp point, and the process's
 * SIGBUS handler, finding the faulting address in that thread's range,
 * jumps back there, so the copy returns an error instead.
 *
 * The handler is installed once, by the first engine that asks, and
 * chains to the one it replaced for every other bus error (another
 * thread's, an address outside the copy's source, a signal sent with
 * kill), which then behaves as if this handler were not there: the CLI's
 * one-line message, Python's faulthandler, or the default action. A
 * handler installed later over this one takes bus errors first; the
 * engine can tell (stk__io_guard_ready) and the loader's "auto" then
 * reads with pread. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "io.h"

struct guard {
  sigjmp_buf jb;
  const uint8_t *lo, *hi; /* the source range being read, from its first
                           * page's start (a memory error's address may
                           * be its page's) */
};

/* initial-exec: no lazy allocation when the handler reads it, even in a
 * library loaded with dlopen (the Python binding). */
static __thread struct guard *volatile active __attribute__((tls_model("initial-exec")));
static struct sigaction prev;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_rc = STK_ESYS;
static uintptr_t page_mask = ~(uintptr_t)4095;

static void on_bus(int sig, siginfo_t *si, void *uc) {
  struct guard *g = active;
  const uint8_t *a = si->si_addr;
  if (g && si->si_code > 0 && a >= g->lo && a < g->hi) {
    active = NULL;
    siglongjmp(g->jb, 1);
  }
  /* Not a guarded copy's: as if the previous handler were the only one.
   * SIG_DFL and SIG_IGN first, whatever the flags: a SA_RESETHAND handler
   * that already ran is SIG_DFL with SA_SIGINFO still set. */
  int plain = prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN;
  if (!plain && (prev.sa_flags & SA_SIGINFO)) {
    if (prev.sa_flags & SA_RESETHAND) signal(SIGBUS, SIG_DFL);
    prev.sa_sigaction(sig, si, uc);
    return;
  }
  if (!plain) {
    if (prev.sa_flags & SA_RESETHAND) signal(SIGBUS, SIG_DFL);
    prev.sa_handler(sig);
    return;
  }
  if (prev.sa_handler == SIG_IGN && si->si_code <= 0) return; /* sent, and ignored before */
  signal(SIGBUS, SIG_DFL);
  /* A fault: returning runs the access again, which now ends the process
   * as it would have; a signal sent by kill is raised again (pending while
   * this handler runs). */
  if (si->si_code <= 0) raise(SIGBUS);
}

static void install(void) {
  long psz = sysconf(_SC_PAGESIZE);
  if (psz > 0) page_mask = ~((uintptr_t)psz - 1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_bus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &prev) == 0) install_rc = 0;
}

int stk__io_guard_ready(void) {
  pthread_once(&once, install);
  if (install_rc) return 0;
  struct sigaction cur;
  return sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
         cur.sa_sigaction == on_bus;
}

static void unblock_bus(void) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGBUS);
  pthread_sigmask(SIG_UNBLOCK, &s, NULL);
}

int stk__io_guarded_copy(struct stk_io_req *r, const uint8_t *src, uint64_t n) {
  /* A bus error while SIGBUS is blocked ends the process whatever the
   * handler, and a thread starts with its creator's mask. */
  static __thread int unblocked __attribute__((tls_model("initial-exec")));
  if (!unblocked) {
    unblock_bus();
    unblocked = 1;
  }
  struct guard g;
  g.lo = (const uint8_t *)((uintptr_t)src & page_mask);
  g.hi = src + n;
  if (sigsetjmp(g.jb, 0)) {
    unblock_bus(); /* left by the handler, during which SIGBUS is blocked */
    return STK_ETRUNC;
  }
  /* The fences keep the compiler from moving the range's stores or the
   * copy across the store that arms the guard, or the copy past the one
   * that disarms it (the handler runs on this thread, between any two
   * instructions). */
  atomic_signal_fence(memory_order_seq_cst);
  active = &g;
  atomic_signal_fence(memory_order_seq_cst);
  if (r->on_copy)
    r->on_copy(r, src, n);
  else
    memcpy(r->buf, src, n);
  atomic_signal_fence(memory_order_seq_cst);
  active = NULL;
  return 0;
}
