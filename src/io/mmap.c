/* The mapping engine: reads without a copy, for samples far larger than a
 * read (unet3d: 90-224 MB each). A worker maps the requested file range at
 * the request's address, inside the batch's address-space reservation
 * (MAP_FIXED over it), then fills in the page tables by touching each
 * page, which reads from storage whatever the page cache lacks. The batch's
 * bytes are then the page cache's own pages: nothing is copied, and no
 * fresh anonymous memory is faulted in and cleared. Where the page cache
 * holds large folios (ext4 and XFS on recent kernels, tmpfs with huge
 * pages) a range placed at an address congruent to its file offset modulo
 * 2 MiB is mapped a PMD at a time, so a 146 MB sample costs ~70 page-table
 * entries, not 36,000.
 *
 * The price of mapping is the one every mmap reader pays (DALI, numpy's
 * memmap, LMDB): a file truncated while its pages are mapped, or a device
 * that fails a read of one, makes the touch of those pages raise SIGBUS.
 * A file already shorter than the range when it is mapped is an error
 * (STK_ETRUNC), as for a read. Files that
 * cannot be mapped (some FUSE and network file systems) are read with
 * pread into anonymous memory placed at the same address. */
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"

#define FAULT_AROUND (64u << 10)

static uint64_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (uint64_t)p : 4096;
}

/* A range of the reservation back to zero pages: read, they cost no memory;
 * written, a page each. */
static int region_blank(uint8_t *p, size_t len) {
  void *m = mmap(p, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return m == MAP_FAILED ? stk__from_errno(errno) : 0;
}

/* A file that will not be mapped: read it into anonymous memory there. */
static int copy_in(const struct stk_io_req *r) {
  int rc = region_blank(r->buf, r->len);
  return rc ? rc : stk__io_read_req(r);
}

static int map_req(void *ctx, struct stk_io_req *r) {
  (void)ctx;
  struct stat st;
  if (fstat(r->fd, &st) != 0) return stk__from_errno(errno);
  uint64_t need = r->need ? r->need : r->len, size = (uint64_t)st.st_size, pg = page_size();
  if (!S_ISREG(st.st_mode)) return copy_in(r);
  if (size < r->off + need) return STK_ETRUNC;
  /* Never map pages wholly past the end of the file: touching one would
   * raise SIGBUS. The rest of the range stays zero pages. */
  uint64_t avail = size - r->off, len = STK__MIN(r->len, (avail + pg - 1) / pg * pg);
  /* Private and writable: reads share the page cache's pages, and a caller
   * that writes into its batch (batches are theirs until released) gets
   * its own copy of the page, never a change to the file. */
  void *m = mmap(r->buf, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE,
                 r->fd, (off_t)r->off);
  if (m == MAP_FAILED) {
    if (errno == ENODEV || errno == EACCES || errno == EPERM || errno == EINVAL) return copy_in(r);
    return stk__from_errno(errno);
  }
  /* Fill in the page tables by touching one byte per fault-around window
   * (64 KiB, the kernel's default): each fault maps the window's cached
   * pages, or a whole 2 MiB folio, at once, under the mapping's own lock.
   * MADV_POPULATE_READ walks page by page under the address space's lock.
   * Two threads mapping unet3d files the page cache held in mid-sized
   * folios (memory full, large folios scarce) measured 19-20 GB/s with it,
   * 25.6 GB/s touching every page, 46.6 GB/s touching each window. Pages a
   * touch did not map fault in when first read. */
  const volatile uint8_t *p = r->buf;
  for (uint64_t o = 0; o < len; o += FAULT_AROUND) (void)p[o];
  return 0;
}

int stk__io_region_reserve(uint8_t **p, size_t *cap, size_t need) {
  size_t a = STK_IO_MAP_ALIGN, size = (need + a - 1) / a * a;
  uint8_t *m = mmap(NULL, size + a, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return STK_ENOMEM;
  uint8_t *base = (uint8_t *)(((uintptr_t)m + a - 1) & ~(uintptr_t)(a - 1));
  if (base > m) munmap(m, (size_t)(base - m));
  if (base + size < m + size + a) munmap(base + size, (size_t)(m + size + a - (base + size)));
  stk__io_region_free(*p, *cap);
  *p = base;
  *cap = size;
  return 0;
}

int stk__io_region_reset(uint8_t *p, size_t cap) { return p ? region_blank(p, cap) : 0; }

void stk__io_region_free(uint8_t *p, size_t cap) {
  if (p) munmap(p, cap);
}

static int map_open(struct stk_io **out, const struct stk_io_opts *o, char *err) {
  return stk__io_pool_open(out, o, map_req, NULL, 0, "mmap", err);
}

const struct stk_io_ops stk__io_mmap = {
    .name = "mmap",
    .inline_hook = 1,
    .maps = 1,
    .open = map_open,
    .submit = stk__io_pool_submit,
    .reap = stk__io_pool_reap,
    .close = stk__io_pool_close,
};
