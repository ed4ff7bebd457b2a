/* Checkpoint objects drained to S3: small ones in one PUT, larger ones as a
 * multipart upload whose parts go up in parallel (each read from the local
 * file into memory, so a retry can resend it and SigV4 can hash it).
 *
 * A multipart upload is recorded in a local file beside the checkpoint's
 * objects (its upload id and part size first, fsynced before any part
 * goes up, then one line per part once S3 has it: its number and ETag), so
 * a drain killed mid-object resumes the same upload with the parts still
 * missing instead of sending the object again. An upload S3 no longer
 * knows (aborted, expired: 404 NoSuchUpload) or a record that does not fit
 * the object is started over once, whole. An upload that fails otherwise
 * is kept for the next drain to resume; S3 shows the object only once it
 * is complete, and the record is removed then. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cache/cache_impl.h"
#include "ckpt_impl.h"

#define PART_MIN (16u << 20)  /* bytes per part; more for objects over 10,000 parts */
#define PARTS_MAX 10000
#define PART_THREADS 4

struct upload {
  struct stk_origin *o;
  const char *name, *record;
  char id[1024];
  int fd, no_fsync;
  uint64_t size, part;
  size_t parts;
  char (*etags)[STK_ETAG_MAX]; /* "" = not up yet */
  FILE *rec;                   /* the record, appended to */
  pthread_mutex_t mu;
};

/* Append "part N ETAG" to the record, durably. */
static int record_part(struct upload *u, size_t i, char *err) {
  pthread_mutex_lock(&u->mu);
  int bad = fprintf(u->rec, "part %zu %s\n", i + 1, u->etags[i]) < 0 || fflush(u->rec) != 0 ||
            (!u->no_fsync && fsync(fileno(u->rec)) != 0);
  pthread_mutex_unlock(&u->mu);
  if (bad)
    return stk__errf(err, stk__from_errno(errno), "%s: cannot record the part: %s", u->record,
                     strerror(errno));
  return 0;
}

static int put_part(void *arg, size_t i, char *err) {
  struct upload *u = arg;
  if (u->etags[i][0]) return 0; /* up before a crash */
  uint64_t off = (uint64_t)i * u->part, len = STK__MIN(u->part, u->size - off);
  void *buf = malloc(len);
  if (!buf) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = stk__pread_full(u->fd, buf, len, off);
  if (rc)
    rc = stk__errf(err, rc, "%s: local copy unreadable at %llu", u->name, (unsigned long long)off);
  else
    rc = stk__s3_multipart_part(u->o, u->name, u->id, (int)i + 1, buf, len, u->etags[i], err);
  free(buf);
  if (!rc) rc = record_part(u, i, err);
  return rc;
}

/* Read the record of an earlier drain of this object: its upload id and
 * the parts S3 has. 0 when it fits this object (same part size and count),
 * -1 otherwise (none, torn, another size). */
static int record_load(struct upload *u) {
  FILE *f = fopen(u->record, "r");
  if (!f) return -1;
  char line[1200];
  unsigned long long part = 0, parts = 0;
  int rc = -1;
  if (fgets(line, sizeof line, f) &&
      sscanf(line, "upload %1023s %llu %llu", u->id, &part, &parts) == 3 && part == u->part &&
      parts == u->parts) {
    rc = 0;
    unsigned long long n;
    char tag[STK_ETAG_MAX]; /* 80: %79s */
    while (fgets(line, sizeof line, f))
      if (strchr(line, '\n') && sscanf(line, "part %llu %79s", &n, tag) == 2 && n >= 1 &&
          n <= parts)
        snprintf(u->etags[n - 1], STK_ETAG_MAX, "%s", tag);
  }
  fclose(f);
  if (rc) u->id[0] = 0;
  return rc;
}

/* Begin a new upload and write its record's first line, durably. */
static int record_begin(struct upload *u, char *err) {
  memset(u->etags, 0, u->parts * sizeof *u->etags);
  int rc = stk__s3_multipart_begin(u->o, u->name, u->id, sizeof u->id, err);
  if (rc) return rc;
  FILE *f = fopen(u->record, "w");
  int bad = !f || fprintf(f, "upload %s %" PRIu64 " %zu\n", u->id, u->part, u->parts) < 0 ||
            fflush(f) != 0 || (!u->no_fsync && fsync(fileno(f)) != 0);
  if (f && fclose(f) != 0) bad = 1;
  if (bad)
    return stk__errf(err, stk__from_errno(errno), "%s: cannot record the upload: %s", u->record,
                     strerror(errno));
  return 0;
}

static int multipart(struct upload *u, char *err) {
  int resumed = record_load(u) == 0, rc = 0;
  if (!resumed) rc = record_begin(u, err);
  for (int attempt = 0; !rc; attempt++) {
    u->rec = fopen(u->record, "a");
    if (!u->rec)
      return stk__errf(err, stk__from_errno(errno), "%s: %s", u->record, strerror(errno));
    rc = stk__ckpt_pfor(PART_THREADS, u->parts, put_part, u, err);
    fclose(u->rec);
    u->rec = NULL;
    if (!rc) rc = stk__s3_multipart_complete(u->o, u->name, u->id, (int)u->parts, u->etags, err);
    /* The upload S3 no longer knows, or parts it does not take: once,
     * start the object over. */
    int gone = rc == STK_ENOENT || (rc == STK_EIO && strstr(err, "InvalidPart"));
    if (!rc || !resumed || attempt > 0 || !gone) break;
    stk_log(STK_LOG_WARN, "%s: resuming its multipart upload failed (%s); starting it over",
            u->name, err);
    stk__s3_multipart_abort(u->o, u->name, u->id);
    rc = record_begin(u, err);
  }
  if (!rc) unlink(u->record);
  return rc;
}

int stk__ckpt_s3_put_file(struct stk_origin *o, const char *name, int fd, uint64_t size,
                          const char *record, int no_fsync, char *err) {
  if (size <= PART_MIN) {
    void *buf = malloc(size ? size : 1);
    if (!buf) return stk__errf(err, STK_ENOMEM, "out of memory");
    int rc = stk__pread_full(fd, buf, size, 0);
    if (rc)
      rc = stk__errf(err, rc, "%s: local copy unreadable", name);
    else
      rc = stk__s3_put(o, name, buf, size, err);
    free(buf);
    return rc;
  }
  struct upload u = {.o = o, .name = name, .record = record, .fd = fd, .no_fsync = no_fsync,
                     .size = size, .part = PART_MIN};
  while ((size + u.part - 1) / u.part > PARTS_MAX) u.part *= 2;
  u.parts = (size_t)((size + u.part - 1) / u.part);
  if (!(u.etags = calloc(u.parts, sizeof *u.etags)))
    return stk__errf(err, STK_ENOMEM, "out of memory");
  pthread_mutex_init(&u.mu, NULL);
  int rc = multipart(&u, err);
  pthread_mutex_destroy(&u.mu);
  free(u.etags);
  return rc;
}

int stk__ckpt_s3_put_mem(struct stk_origin *o, const char *name, const char *text, size_t len,
                         char *err) {
  return stk__s3_put(o, name, text, len, err);
}
