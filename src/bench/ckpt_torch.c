/* `--checkpoint-io torch`: checkpoint files written and read the way
 * DLIO's PyTorch backend does it, as strace shows its calls (docs/bench.md,
 * "K5"). DLIO opens each file with Python's open(name, "wb") and calls
 * torch.save into it; torch's zip writer then, for each tensor of the state
 * in the state's order, computes the record's zip CRC-32 (a table-driven
 * slicing-by-16 loop, PyTorch's own replacement for miniz's) and hands the
 * record to Python's BufferedWriter, which gathers pieces that fit its
 * buffer and passes any larger one to a single write() of its full length,
 * straight from the tensor's memory. No O_DIRECT, no fsync (DLIO's fsync
 * option never reaches its writer), one thread per rank. Loads are
 * torch.load: each record read in one read() into newly allocated memory,
 * no CRC check, the state dropped once the file is read.
 *
 * The state lies in memory allocated as torch's CPU allocator allocates a
 * tensor (stk__ckpt_torch_alloc): 64-byte aligned, from the C library,
 * with no huge-page advice (torch advises only with THP_MEM_ALLOC_ENABLE=1
 * in the environment, which DLIO does not set).
 *
 * What is left out: the zip's headers, pickle and central directory (about
 * 10 KB per file of llama_7b_small's 1.6 GB), so that both modes write the
 * same bytes; and the pickling, which is Python's and small. The CRC32 is
 * computed (its cost is most of torch.save's own time) and dropped. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/base.h"
#include "bench_impl.h"

/* Python's BufferedWriter's buffer (io.DEFAULT_BUFFER_SIZE). */
#define GATHER 8192

static uint32_t crc_tab[16][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    crc_tab[0][b] = c;
  }
  /* table k: the byte's CRC pushed through k more zero bytes */
  for (int k = 1; k < 16; k++)
    for (uint32_t b = 0; b < 256; b++)
      crc_tab[k][b] = (crc_tab[k - 1][b] >> 8) ^ crc_tab[0][crc_tab[k - 1][b] & 0xff];
}

/* Four little-endian words (this file builds for little-endian hosts
 * only: the slicing tables assume that byte order). */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt_torch.c's CRC-32 assumes a little-endian host"
#endif

/* One 16-byte slice: four words looked up in the sixteen tables. */
static inline uint32_t crc_slice16(uint32_t crc, const unsigned char *p) {
  uint32_t w[4];
  memcpy(w, p, 16);
  uint32_t a = w[0] ^ crc, b = w[1], c = w[2], d = w[3];
  return crc_tab[15][a & 0xff] ^ crc_tab[14][(a >> 8) & 0xff] ^ crc_tab[13][(a >> 16) & 0xff] ^
         crc_tab[12][a >> 24] ^ crc_tab[11][b & 0xff] ^ crc_tab[10][(b >> 8) & 0xff] ^
         crc_tab[9][(b >> 16) & 0xff] ^ crc_tab[8][b >> 24] ^ crc_tab[7][c & 0xff] ^
         crc_tab[6][(c >> 8) & 0xff] ^ crc_tab[5][(c >> 16) & 0xff] ^ crc_tab[4][c >> 24] ^
         crc_tab[3][d & 0xff] ^ crc_tab[2][(d >> 8) & 0xff] ^ crc_tab[1][(d >> 16) & 0xff] ^
         crc_tab[0][d >> 24];
}

/* Four slices (64 bytes) a turn of the loop, as PyTorch's crc32_16bytes
 * unrolls it. On a 499 MB buffer on the development VM: one slice a turn
 * 2.1-2.4 GB/s, four 2.1-3.5, torch.save's own CRC 2.6-3.5. */
uint32_t stk__ckpt_torch_crc32(uint32_t crc, const void *data, size_t len) {
  pthread_once(&crc_once, crc_init);
  const unsigned char *p = data;
  crc = ~crc;
  for (; len >= 64; len -= 64, p += 64) {
    crc = crc_slice16(crc, p);
    crc = crc_slice16(crc, p + 16);
    crc = crc_slice16(crc, p + 32);
    crc = crc_slice16(crc, p + 48);
  }
  for (; len >= 16; len -= 16, p += 16) crc = crc_slice16(crc, p);
  while (len--) crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

void *stk__ckpt_torch_alloc(uint64_t n) {
  void *p = NULL;
  if (n > SIZE_MAX || posix_memalign(&p, 64, n ? (size_t)n : 1)) return NULL;
  return p;
}

/* write() until all n bytes are in; 0 or an errno. */
static int write_all(int fd, const char *p, uint64_t n) {
  while (n) {
    ssize_t w = write(fd, p, (size_t)STK__MIN(n, (uint64_t)SSIZE_MAX));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : ENOSPC;
    p += w;
    n -= (uint64_t)w;
  }
  return 0;
}

int stk__ckpt_torch_write(int fd, const uint64_t *t, size_t nt, const char *state, uint32_t *crcs) {
  char gather[GATHER];
  size_t used = 0;
  uint32_t all = 0;
  int e = 0;
  for (size_t i = 0; i < nt && !e; state += t[i], i++) {
    all ^= stk__ckpt_torch_crc32(0, state, t[i]);
    if (t[i] <= GATHER - used) { /* fits what is left of the buffer */
      memcpy(gather + used, state, t[i]);
      used += t[i];
      continue;
    }
    if (used && (e = write_all(fd, gather, used))) break;
    used = 0;
    if (t[i] >= GATHER) {
      e = write_all(fd, state, t[i]);
    } else {
      memcpy(gather, state, t[i]);
      used = t[i];
    }
  }
  if (!e && used) e = write_all(fd, gather, used);
  *crcs = all;
  return e;
}

int stk__ckpt_torch_read(int fd, const uint64_t *t, size_t nt, uint64_t *got) {
  void **mem = calloc(nt ? nt : 1, sizeof *mem);
  int e = mem ? 0 : ENOMEM;
  *got = 0;
  for (size_t i = 0; i < nt && !e; i++) {
    if (!(mem[i] = stk__ckpt_torch_alloc(t[i]))) {
      e = ENOMEM;
      break;
    }
    char *p = mem[i];
    uint64_t left = t[i];
    while (left) {
      ssize_t r = read(fd, p, (size_t)STK__MIN(left, (uint64_t)SSIZE_MAX));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) e = errno;
      if (r <= 0) break;
      p += r;
      left -= (uint64_t)r;
      *got += (uint64_t)r;
    }
    if (left) break; /* short file: the caller compares *got */
  }
  if (!e) { /* anything past the tensors (none in a file this mode wrote) */
    char tail[64];
    ssize_t r;
    while ((r = read(fd, tail, sizeof tail)) > 0 || (r < 0 && errno == EINTR)) *got += r > 0 ? (uint64_t)r : 0;
  }
  for (size_t i = 0; mem && i < nt; i++) free(mem[i]);
  free(mem);
  return e;
}
