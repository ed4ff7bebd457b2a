/* STK_EXPORT marks the public API. libstoker is compiled with
 * -fvisibility=hidden, so only what carries this mark is exported from
 * libstoker.so: internal functions (stk__*) cannot collide with a host
 * program's symbols or become an accidental ABI. python/tools/
 * apply_export.py puts the mark on every declaration of these headers. */
#ifndef STOKER_EXPORT_H
#define STOKER_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define STK_EXPORT __attribute__((visibility("default")))
#else
#define STK_EXPORT
#endif

#endif
