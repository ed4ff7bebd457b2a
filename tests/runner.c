/* The test runner: every test in its own process, in its own fresh
 * directory, under a timeout; data-driven CLI cases from tests/cli/NAME.cases.
 * Prints one line per test and ends with "N passed, N failed, N skipped".
 *
 * usage: stoker-test [-t SECONDS] [-l] [PATTERN...]  (substring match) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define X(n) void test_##n(void);
#include "tests_list.h"
#undef X

struct test {
  const char *name;
  void (*fn)(void);
  char *cli; /* data-driven case: "exit|expect|command" */
};

static struct test builtin[] = {
#define X(n) {#n, test_##n, NULL},
#include "tests_list.h"
#undef X
};

#define EXIT_SKIP 77
static char root_dir[PATH_MAX];

void test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "    %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

void test_skip(const char *why) {
  fprintf(stderr, "    skip: %s\n", why);
  exit(EXIT_SKIP);
}

const char *test_stoker_bin(void) {
  const char *b = getenv("STOKER_BIN");
  if (!b) test_fail(__FILE__, __LINE__, "STOKER_BIN is not set (run through make test)");
  return b;
}

const char *test_shared_data(void) {
  static char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/../shared/data", root_dir);
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode) ? p : NULL;
}

int test_sh(char **output, const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  char full[8400];
  snprintf(full, sizeof full, "(%s) 2>&1", cmd);
  FILE *p = popen(full, "r");
  if (!p) test_fail(__FILE__, __LINE__, "popen failed");
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
    n += r;
    if (cap - n < 2) buf = realloc(buf, cap *= 2);
  }
  buf[n] = 0;
  int st = pclose(p);
  if (output)
    *output = buf;
  else
    free(buf);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void test_buf_put(struct test_buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    CHECK(b->p);
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
}

void test_buf_le(struct test_buf *b, uint64_t v, int bytes) {
  uint8_t t[8];
  for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
  test_buf_put(b, t, (size_t)bytes);
}

uint64_t test_ld_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void test_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
    test_fail(__FILE__, __LINE__, "cannot write %s", path);
}

uint8_t *test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) test_fail(__FILE__, __LINE__, "cannot read %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  if (fread(b, 1, (size_t)n, f) != (size_t)n) test_fail(__FILE__, __LINE__, "short read %s", path);
  fclose(f);
  b[n] = 0;
  if (len) *len = (size_t)n;
  return b;
}

/* A data-driven CLI case: run the command with $STK set to the CLI, check
 * the exit status and that the output contains the expected text. */
static void run_cli_case(const char *spec) {
  char *s = strdup(spec);
  char *bar1 = strchr(s, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
  if (!bar2) test_fail(__FILE__, __LINE__, "bad case line: %s", spec);
  *bar1 = *bar2 = 0;
  int want = atoi(s);
  char *expect = bar1 + 1, *cmd = bar2 + 1;
  while (*expect == ' ') expect++;
  for (char *e = expect + strlen(expect); e > expect && e[-1] == ' ';) *--e = 0;
  setenv("STK", test_stoker_bin(), 1);
  char *out;
  int rc = test_sh(&out, "%s", cmd);
  if (rc != want) test_fail(__FILE__, __LINE__, "exit %d, want %d; output:\n%s", rc, want, out);
  if (*expect && !strstr(out, expect))
    test_fail(__FILE__, __LINE__, "output lacks '%s':\n%s", expect, out);
  free(out);
  free(s);
}

static struct test *tests;
static size_t ntests;

static void add_test(const char *name, void (*fn)(void), char *cli) {
  tests = realloc(tests, (ntests + 1) * sizeof *tests);
  tests[ntests++] = (struct test){strdup(name), fn, cli};
}

/* Lines "name | exit | expect | command"; '#' starts a comment. */
static void load_cli_cases(void) {
  char dir[PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/tests/cli", root_dir);
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char **names = NULL;
  size_t nn = 0;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".cases")) {
      names = realloc(names, (nn + 1) * sizeof *names);
      names[nn++] = strdup(e->d_name);
    }
  closedir(d);
  for (size_t k = 0; k < nn; k++) {
    char path[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    FILE *f = fopen(path, "r");
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
      line[strcspn(line, "\n")] = 0;
      if (!line[0] || line[0] == '#') continue;
      char *bar = strchr(line, '|');
      if (!bar) continue;
      *bar = 0;
      char name[256];
      char *nm = line;
      while (*nm == ' ') nm++;
      for (char *q = nm + strlen(nm); q > nm && q[-1] == ' ';) *--q = 0;
      snprintf(name, sizeof name, "cli_%.200s", nm);
      add_test(name, NULL, strdup(bar + 1));
    }
    if (f) fclose(f);
    free(names[k]);
  }
  free(names);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static int matches(const char *name, int argc, char **argv, int first) {
  if (first >= argc) return 1;
  for (int i = first; i < argc; i++)
    if (strstr(name, argv[i])) return 1;
  return 0;
}

int main(int argc, char **argv) {
  int timeout = 120, list = 0, first = 1;
  while (first < argc && argv[first][0] == '-') {
    if (!strcmp(argv[first], "-t") && first + 1 < argc) {
      timeout = atoi(argv[first + 1]);
      first += 2;
    } else if (!strcmp(argv[first], "-l")) {
      list = 1;
      first++;
    } else {
      fprintf(stderr, "usage: stoker-test [-t SECONDS] [-l] [PATTERN...]\n");
      return 2;
    }
  }
  if (!getcwd(root_dir, sizeof root_dir)) return 2;
  for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
    add_test(builtin[i].name, builtin[i].fn, NULL);
  load_cli_cases();

  char base[PATH_MAX];
  const char *tmp = getenv("TMPDIR");
  snprintf(base, sizeof base, "%s/stoker-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int passed = 0, failed = 0, skipped = 0;
  for (size_t i = 0; i < ntests; i++) {
    struct test *t = &tests[i];
    if (!matches(t->name, argc, argv, first)) continue;
    if (list) {
      printf("%s\n", t->name);
      continue;
    }
    char dir[PATH_MAX + 300];
    snprintf(dir, sizeof dir, "%s/%s", base, t->name);
    mkdir(dir, 0755);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      if (chdir(dir) != 0) _exit(3);
      setenv("STOKER_ROOT", root_dir, 1);
      alarm((unsigned)timeout);
      if (t->fn)
        t->fn();
      else
        run_cli_case(t->cli);
      /* exit, not _exit: LeakSanitizer reports at exit in sanitizer builds. */
      exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    kill(-pid, SIGKILL); /* stragglers the test started */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("ok    %-44s %8.0f ms\n", t->name, ms);
      passed++;
      nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_SKIP) {
      printf("skip  %s\n", t->name);
      skipped++;
      nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    } else {
      if (WIFSIGNALED(st))
        printf("FAIL  %s: %s%s\n", t->name, strsignal(WTERMSIG(st)),
               WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
      else
        printf("FAIL  %s (exit %d; files kept in %s)\n", t->name, WEXITSTATUS(st), dir);
      failed++;
    }
  }
  if (!list) {
    rmdir(base);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  }
  return failed ? 1 : 0;
}
