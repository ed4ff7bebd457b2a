/* The error table's two lookups, detail-string formatting and the mapping
 * from errno to stoker's codes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "base.h"

const char *stk_strerror(int err) {
  if (err == 0) return "success";
  switch (err) {
#define X(name, val, msg) \
  case val:               \
    return msg;
    STK_ERRNO_MAP(X)
#undef X
  }
  return "unknown error";
}

const char *stk_err_name(int err) {
  if (err == 0) return "STK_OK";
  switch (err) {
#define X(name, val, msg) \
  case val:               \
    return "STK_" #name;
    STK_ERRNO_MAP(X)
#undef X
  }
  return "STK_E?";
}

int stk__errf(char *buf, int code, const char *fmt, ...) {
  if (buf) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, STK_ERRMSG_MAX, fmt, ap);
    va_end(ap);
  }
  return code;
}

int stk__from_errno(int e) {
  switch (e) {
    case 0: return 0;
    case ENOENT: case ENOTDIR: return STK_ENOENT;
    case EACCES: case EPERM: case EROFS: return STK_EACCES;
    case ENOMEM: return STK_ENOMEM;
    case EINVAL: return STK_EINVAL;
    case ENOSPC: case EDQUOT: return STK_ENOSPC;
    case EEXIST: return STK_EEXIST;
    case EBUSY: return STK_EBUSY;
    case EAGAIN: return STK_EAGAIN;
    case ETIMEDOUT: return STK_ETIMEDOUT;
    case ECANCELED: case EINTR: return STK_ECANCELED;
    case EOPNOTSUPP: case ENOSYS: return STK_ENOTSUP;
    case EIO: case EISDIR: return STK_EIO;
    default: return STK_ESYS;
  }
}

int stk__pread_full(int fd, void *buf, size_t len, uint64_t off) {
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = pread(fd, p, len, (off_t)off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return stk__from_errno(errno);
    }
    if (n == 0) return STK_ETRUNC;
    p += n;
    len -= (size_t)n;
    off += (uint64_t)n;
  }
  return 0;
}

int stk__write_full(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return stk__from_errno(errno);
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}
