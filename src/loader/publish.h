/* The loader's publication hook (publish.c): the pipeline calls these at
 * open, at close and where it already takes its stats. Every call accepts
 * NULL (publication off or failed), so the pipeline needs no checks. */
#ifndef STOKER_LOADER_PUBLISH_H
#define STOKER_LOADER_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

struct stk_loader;
struct stk_pub;
struct stk__publish;

/* Create this loader's file in the runtime directory; NULL when
 * publication is off or impossible (never an error for the loader). */
struct stk__publish *stk__publish_open(const char *dataset);
/* The consumer starts waiting for a batch. */
void stk__publish_wait_begin(struct stk__publish *pb);
/* A batch was handed over: refresh the counters (rate-limited). */
void stk__publish_tick(struct stk__publish *pb, struct stk_loader *l);
/* Write the final counters, mark the file closed and remove it. Call
 * before the loader's state is freed. */
void stk__publish_close(struct stk__publish *pb, struct stk_loader *l);

/* Reader side (the agent): copy a consistent snapshot of a mapped file.
 * 0, STK_EFORMAT (not a publication), STK_ENOTSUP (another version) or
 * STK_EBUSY (the writer kept it changing). */
int stk__pub_read(const void *mapped, struct stk_pub *out);
/* Field 22 (start time in clock ticks) of PROC_ROOT/PID/stat; 0 if gone. */
uint64_t stk__pid_start_ticks(const char *proc_root, long pid);
/* The runtime directory ($STOKER_RUNTIME_DIR, else /dev/shm/stoker). */
const char *stk__runtime_dir(char *buf, size_t n);

#endif
