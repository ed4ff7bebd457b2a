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

#include "../base/publication.h"

#endif
