/* The loader's fields decoder (STK_DECODE_FIELDS, stk_batch_sample): a
 * WebDataset and a TFRecord of Examples written here with three members
 * (features) per sample arrive with each one's bytes, the key and label,
 * and a .npy member described by its header (dtype and shape, data without
 * the header); a field list keeps only the fields it names and fails a
 * sample that lacks one, naming it. */
#include <sys/stat.h>

#include "stoker/stoker.h"
#include "test.h"

#define N 40

/* A version 1.0 .npy of a C-order int32 array of shape (2, 3): 128-byte
 * header, then 24 data bytes derived from id. */
static size_t make_npy(uint8_t *out, int id) {
  const char *dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
  memset(out, ' ', 128);
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  out[8] = 128 - 10;
  out[9] = 0;
  memcpy(out + 10, dict, strlen(dict));
  out[127] = '\n';
  for (int k = 0; k < 6; k++) {
    int32_t v = id * 10 + k;
    memcpy(out + 128 + 4 * k, &v, 4);
  }
  return 128 + 24;
}

static void payload(int id, uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(id * 7 + i);
}

static void write_ds(const char *format) {
  struct stk_writer *w;
  struct stk_writer_opts wo = {.format = format, .dir = "ds", .samples_per_shard = 16};
  CHECK_OK(stk_writer_open(&w, &wo, NULL));
  for (int id = 0; id < N; id++) {
    static uint8_t img[300], npy[160];
    char cls[8];
    size_t ilen = 100 + (size_t)id * 5;
    payload(id, img, ilen);
    snprintf(cls, sizeof cls, "%d", id % 4);
    struct stk_sample s;
    memset(&s, 0, sizeof s);
    s.label = id % 4;
    snprintf(s.key, sizeof s.key, "k%04d", id);
    s.nfields = 3;
    snprintf(s.fields[0].name, sizeof s.fields[0].name, "jpg");
    s.fields[0].data = img;
    s.fields[0].len = s.fields[0].raw_len = ilen;
    snprintf(s.fields[1].name, sizeof s.fields[1].name, "cls");
    s.fields[1].data = (const uint8_t *)cls;
    s.fields[1].len = s.fields[1].raw_len = strlen(cls);
    snprintf(s.fields[2].name, sizeof s.fields[2].name, "npy");
    s.fields[2].data = npy;
    s.fields[2].len = s.fields[2].raw_len = make_npy(npy, id);
    CHECK_OK(stk_writer_add(w, &s));
  }
  CHECK_OK(stk_writer_close(w));
}

static int find(const struct stk_sample *s, const char *name) {
  for (int k = 0; k < s->nfields; k++)
    if (!strcmp(s->fields[k].name, name)) return k;
  return -1;
}

/* Run a FIELDS loader over ds with the field list; returns the error code
 * of the run (0 at the end of the epoch) and checks every sample. */
static int run(struct stk_dataset *ds, const char *list, int *seen, char *msg, int tf) {
  struct stk_loader_opts o;
  stk_loader_opts_init(&o);
  o.batch_size = 8;
  o.threads = 2;
  struct stk_decode_cfg dc = {0};
  o.decode = &dc;
  dc.kind = STK_DECODE_FIELDS;
  dc.field = list;
  struct stk_sampler_opts so = {0};
  o.sampler = &so;
  so.shuffle = STK_SHUFFLE_GLOBAL;
  so.seed = 5;
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, msg));
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    for (uint32_t i = 0; i < b->n; i++) {
      struct stk_sample s;
      CHECK_OK(stk_batch_sample(l, b, i, &s));
      int id = (int)s.index;
      CHECK(id >= 0 && id < N && !seen[id]);
      seen[id] = 1;
      char key[16];
      snprintf(key, sizeof key, "k%04d", id);
      if (!tf) CHECK_STR(s.key, key); /* TFRecord: the key is a feature, "__key__" */
      CHECK_EQ(s.label, id % 4);
      int c = find(&s, "cls");
      CHECK(c >= 0);
      CHECK_EQ(s.fields[c].len, 1);
      CHECK_EQ(s.fields[c].data[0], '0' + id % 4);
      CHECK_EQ(s.fields[c].type, STK_ELEM_NONE);
      int n = find(&s, "npy");
      CHECK(n >= 0);
      CHECK_EQ(s.fields[n].type, STK_ELEM_I32);
      CHECK_EQ(s.fields[n].ndim, 2);
      CHECK_EQ(s.fields[n].shape[0], 2);
      CHECK_EQ(s.fields[n].shape[1], 3);
      CHECK_EQ(s.fields[n].len, 24);
      for (int k = 0; k < 6; k++) {
        int32_t v;
        memcpy(&v, s.fields[n].data + 4 * k, 4);
        CHECK_EQ(v, id * 10 + k);
      }
      int j = find(&s, "jpg");
      if (list) {
        CHECK_EQ(j, -1);
        CHECK_EQ(s.nfields, 2);
      } else {
        CHECK_EQ(s.nfields, 3 + (tf && find(&s, "__key__") >= 0));
        CHECK(j >= 0);
        CHECK_EQ(s.fields[j].len, 100 + id * 5);
        uint8_t want[300];
        payload(id, want, s.fields[j].len);
        CHECK(!memcmp(s.fields[j].data, want, s.fields[j].len));
      }
    }
    CHECK_EQ(stk_batch_sample(l, b, b->n, &(struct stk_sample){0}), STK_EINVAL);
    stk_batch_release(l, b);
  }
  snprintf(msg, STK_ERRMSG_MAX, "%s", stk_loader_errmsg(l));
  stk_loader_close(l);
  return rc == STK_EOF ? 0 : rc;
}

static void every_member(const char *format) {
  write_ds(format);
  int tf = !strcmp(format, "tfrecord");
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_open(&ds, "ds", NULL, err));
  int seen[N] = {0};
  CHECK_OK(run(ds, NULL, seen, err, tf));
  for (int i = 0; i < N; i++) CHECK_MSG(seen[i], "sample %d missing", i);
  memset(seen, 0, sizeof seen);
  CHECK_OK(run(ds, "npy,cls", seen, err, tf));
  for (int i = 0; i < N; i++) CHECK_MSG(seen[i], "sample %d missing", i);
  memset(seen, 0, sizeof seen);
  CHECK(run(ds, "cls,png", seen, err, tf) == STK_EFORMAT);
  CHECK_CONTAINS(err, "no field 'png'");
  CHECK_CONTAINS(err, tf ? ".tfrecord" : ".tar");
  stk_dataset_close(ds);
}

/* WebDataset members; TFRecord Example features (the Example's wrapping
 * "data" field left out). */
TEST(loader_fields_wds_members_with_key_label_and_npy_shape) { every_member("wds"); }
TEST(loader_fields_tfrecord_features_with_label_and_npy_shape) { every_member("tfrecord"); }

TEST(loader_fields_batch_sample_refuses_other_batches) {
  write_ds("wds");
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_dataset_open(&ds, "ds", NULL, err));
  struct stk_loader_opts o;
  stk_loader_opts_init(&o);
  o.batch_size = 4;
  struct stk_loader *l;
  CHECK_OK(stk_loader_open(&l, ds, &o, err));
  struct stk_batch *b;
  CHECK_OK(stk_loader_next(l, &b));
  struct stk_sample s;
  CHECK_EQ(stk_batch_sample(l, b, 0, &s), STK_EINVAL); /* a raw loader's batch */
  stk_batch_release(l, b);
  stk_loader_close(l);
  stk_dataset_close(ds);
}
