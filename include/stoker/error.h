/* Error codes of libstoker: one X-macro table yields the enum, the names and
 * the messages, so the three can never disagree. Every call that can fail
 * returns int: 0 on success, one of these negative codes on failure. */
#ifndef STOKER_ERROR_H
#define STOKER_ERROR_H

#include "stoker/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STK_ERRNO_MAP(X)                                          \
  X(EINVAL, -1, "invalid argument")                               \
  X(ENOMEM, -2, "out of memory")                                  \
  X(EIO, -3, "input/output error")                                \
  X(ENOENT, -4, "no such file or directory")                      \
  X(EACCES, -5, "permission denied")                              \
  X(EFORMAT, -6, "malformed data")                                \
  X(ECRC, -7, "checksum mismatch")                                \
  X(ETRUNC, -8, "truncated data")                                 \
  X(ERANGE, -9, "value out of range")                             \
  X(EEMPTY, -10, "empty dataset")                                 \
  X(ENOTSUP, -11, "operation not supported")                      \
  X(EOF, -12, "end of data")                                      \
  X(ECANCELED, -13, "operation canceled")                         \
  X(ETIMEDOUT, -14, "timed out")                                  \
  X(EDECODE, -15, "decode failed")                                \
  X(ENOSPC, -16, "no space left on device")                       \
  X(EEXIST, -17, "file exists")                                   \
  X(EUSAGE, -18, "usage error")                                   \
  X(EBUSY, -19, "resource busy")                                  \
  X(ESYS, -20, "system error")                                    \
  X(EAGAIN, -21, "not ready yet")                                 \
  X(ENET, -22, "network error")

/* The codes, STK_EINVAL .. STK_ESYS. STK_EOF is not a failure in the usual
 * sense: stk_loader_next() returns it at the end of the last epoch. */
enum stk_errno {
#define STK__ERR_ENUM(name, val, msg) STK_##name = (val),
  STK_ERRNO_MAP(STK__ERR_ENUM)
#undef STK__ERR_ENUM
};

/* Message of an error code ("checksum mismatch"); never NULL, a static
 * string. Unknown codes give "unknown error". */
STK_EXPORT const char *stk_strerror(int err);

/* Name of an error code ("STK_ECRC"); never NULL, a static string. */
STK_EXPORT const char *stk_err_name(int err);

/* Size of the detail-string buffer that every handle keeps for its last
 * error (file, offset, cause). */
#define STK_ERRMSG_MAX 512

#ifdef __cplusplus
}
#endif
#endif
