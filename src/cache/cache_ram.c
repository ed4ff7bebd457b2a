/* The RAM tier: memfd-backed copies in this process, bounded bytes, LRU. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cache_int.h"

/* ---- the RAM tier ----------------------------------------------------------- */

/* Evict unpinned RAM entries, least recently used first, until need more
 * bytes fit. Called with mu held. */
void stk__ram_make_room(struct stk_cache *c, uint64_t need) {
  while (c->ram_used + need > c->ram_budget) {
    struct entry *v = NULL;
    for (size_t i = 0; i < c->n; i++) {
      struct entry *x = &c->e[i];
      if (x->state == E_READY && x->ram_fd >= 0 && x->pins == 0 && (!v || x->lru < v->lru)) v = x;
    }
    if (!v) return;
    close(v->ram_fd);
    v->ram_fd = -1;
    c->ram_used -= v->size;
    c->st.ram.evictions++;
    if (v->disk_fd < 0) v->state = E_NONE;
  }
}

int stk__new_memfd(uint64_t size, char *err) {
  int fd = memfd_create("stoker-shard", MFD_CLOEXEC);
  if (fd < 0)
    return stk__errf(err, stk__from_errno(errno), "memfd_create failed: %s", strerror(errno));
  if (size != UINT64_MAX && ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return stk__errf(err, STK_ENOMEM, "cannot size a RAM-tier buffer of %llu bytes",
                     (unsigned long long)size);
  }
  return fd;
}

/* Copy size bytes of src into a new memfd. */
int stk__ram_copy(int src, uint64_t size, int *out, char *err) {
  int fd = stk__new_memfd(size, err);
  if (fd < 0) return fd;
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = malloc(CHUNK);
  int rc = buf ? 0 : STK_ENOMEM;
  for (uint64_t off = 0; !rc && off < size;) {
    size_t n = (size_t)STK__MIN((uint64_t)CHUNK, size - off);
    if (!(rc = stk__pread_full(src, buf, n, off))) {
      ssize_t w = pwrite(fd, buf, n, (off_t)off);
      rc = w == (ssize_t)n ? 0 : STK_ENOMEM;
      off += n;
    }
  }
  free(buf);
  if (rc) {
    close(fd);
    return stk__errf(err, rc, "cannot copy a shard into the RAM tier: %s", stk_strerror(rc));
  }
  *out = fd;
  return 0;
}
