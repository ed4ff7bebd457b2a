/* The loader publication's shared pieces (src/base/publication.c): used by
 * the loader that writes a publication and the agent that reads it. */
#ifndef STOKER_BASE_PUBLICATION_H
#define STOKER_BASE_PUBLICATION_H

#include <stddef.h>
#include <stdint.h>

struct stk_pub;

/* Reader side (the agent): copy a consistent snapshot of a mapped file.
 * 0, STK_EFORMAT (not a publication), STK_ENOTSUP (another version) or
 * STK_EBUSY (the writer kept it changing). */
int stk__pub_read(const void *mapped, struct stk_pub *out);
/* Field 22 (start time in clock ticks) of PROC_ROOT/PID/stat; 0 if gone. */
uint64_t stk__pid_start_ticks(const char *proc_root, long pid);
/* The runtime directory ($STOKER_RUNTIME_DIR, else /dev/shm/stoker). */
const char *stk__runtime_dir(char *buf, size_t n);

#endif
