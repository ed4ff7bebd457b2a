/* The loader publication's shared pieces (src/base/publication.c): used by
 * the loader that writes a publication and the agent that reads it. The
 * format itself is public: include/stoker/publication.h. */
#ifndef STOKER_BASE_PUBLICATION_H
#define STOKER_BASE_PUBLICATION_H

#include <stddef.h>
#include <stdint.h>

struct stk_pub;

/* What a reader made of a publication file. */
enum stk__pub_status {
  STK__PUB_OK = 0,
  STK__PUB_NEW,     /* empty, or its magic not yet written: still being made */
  STK__PUB_SIZE,    /* its length is not its size field, or that is out of bounds */
  STK__PUB_FORMAT,  /* not a publication (wrong magic) */
  STK__PUB_VERSION, /* a major version this reader does not know */
  STK__PUB_BUSY,    /* the writer kept it changing: no consistent copy */
  STK__PUB_IO,      /* the read failed */
  STK__PUB_NSTATUS
};
/* One word per status ("ok", "new", "size", ...), for labels and logs. */
extern const char *const stk__pub_status_names[STK__PUB_NSTATUS];

/* Reader side: check a copy of a whole publication file (buf, its length
 * n) by the version rule of stoker/publication.h and, when it is one,
 * copy the part this reader knows into *out with every string terminated
 * and cleaned (job ids and stage names hold only [A-Za-z0-9._:@/-], the
 * dataset only printable ASCII and valid UTF-8: anything else becomes
 * '_' or '?'), so that nothing a publisher writes can break an exposition.
 * A copy taken while seq was odd is STK__PUB_BUSY. */
int stk__pub_parse(const void *buf, size_t n, struct stk_pub *out);
/* Reader side: read the publication open on fd by copy (pread, never a
 * mapping a truncation could pull away), under its sequence lock, and
 * check it with stk__pub_parse. Returns an enum stk__pub_status; *out is
 * written only on STK__PUB_OK. */
int stk__pub_read_fd(int fd, struct stk_pub *out);
/* Field 22 (start time in clock ticks) of PROC_ROOT/PID/stat; 0 if gone. */
uint64_t stk__pid_start_ticks(const char *proc_root, long pid);
/* The runtime directory ($STOKER_RUNTIME_DIR, else /dev/shm/stoker). */
const char *stk__runtime_dir(char *buf, size_t n);

#endif
