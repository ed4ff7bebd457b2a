/* npz tests of src/format and src/gen: stored and deflated members of a
 * zip built by hand, NumPy interop, and DLIO's npz layout (x of shape
 * (H, W, N) with y labels), as NumPy writes it and as gen writes it. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../src/base/json_parse.h"
#include "../src/format/format_impl.h"
#include "stoker/gen.h"
#include "stoker/loader.h" /* one test decodes what the npz parser framed */
#include "test.h"
#include "test_format.h"

/* A zip with a stored "x.npy" and a deflated "y.npy", built by hand. */
static size_t make_npz(uint8_t *out, const uint8_t *x, size_t xl, const uint8_t *y, size_t yl) {
  uint8_t dfl[8192];
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  CHECK(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  zs.next_in = (Bytef *)(uintptr_t)y;
  zs.avail_in = (uInt)yl;
  zs.next_out = dfl;
  zs.avail_out = sizeof dfl;
  CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  size_t dl = zs.total_out;
  deflateEnd(&zs);
  const char *names[2] = {"x.npy", "y.npy"};
  const uint8_t *data[2] = {x, dfl};
  size_t sz[2] = {xl, dl}, usz[2] = {xl, yl}, lho[2];
  uint32_t crc[2] = {(uint32_t)crc32(0, x, (uInt)xl), (uint32_t)crc32(0, y, (uInt)yl)};
  size_t o = 0;
  for (int i = 0; i < 2; i++) {
    lho[i] = o;
    memset(out + o, 0, 30);
    stk__st32(out + o, 0x04034b50u);
    stk__st16(out + o + 8, i ? 8 : 0);
    stk__st32(out + o + 14, crc[i]);
    stk__st32(out + o + 18, (uint32_t)sz[i]);
    stk__st32(out + o + 22, (uint32_t)usz[i]);
    stk__st16(out + o + 26, 5);
    memcpy(out + o + 30, names[i], 5);
    memcpy(out + o + 35, data[i], sz[i]);
    o += 35 + sz[i];
  }
  size_t cd = o;
  for (int i = 0; i < 2; i++) {
    memset(out + o, 0, 46);
    stk__st32(out + o, 0x02014b50u);
    stk__st16(out + o + 10, i ? 8 : 0);
    stk__st32(out + o + 16, crc[i]);
    stk__st32(out + o + 20, (uint32_t)sz[i]);
    stk__st32(out + o + 24, (uint32_t)usz[i]);
    stk__st16(out + o + 28, 5);
    stk__st32(out + o + 42, (uint32_t)lho[i]);
    memcpy(out + o + 46, names[i], 5);
    o += 51;
  }
  memset(out + o, 0, 22);
  stk__st32(out + o, 0x06054b50u);
  stk__st16(out + o + 8, 2);
  stk__st16(out + o + 10, 2);
  stk__st32(out + o + 12, (uint32_t)(o - cd));
  stk__st32(out + o + 16, (uint32_t)cd);
  return o + 22;
}

TEST(format_npz_deflated_member) {
  uint8_t x[300], y[2000], zip[16384];
  uint64_t xs = 300 - 128, ys = 2000 - 128;
  size_t hl = stk__npy_header(x, sizeof x, "|u1", &xs, 1);
  CHECK_EQ(hl, 128);
  memset(x + hl, 7, (size_t)xs);
  stk__npy_header(y, sizeof y, "|u1", &ys, 1);
  for (size_t i = hl; i < sizeof y; i++) y[i] = (uint8_t)(i % 13);
  size_t n = make_npz(zip, x, sizeof x, y, sizeof y);
  mkdir("d", 0755);
  test_write_file("d/a.npz", zip, n);
  struct stk_dataset *ds = open_ds("d", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 0, 1, &buf, &cap, &s));
  CHECK_EQ(s.nfields, 2);
  CHECK_STR(s.fields[0].name, "x");
  CHECK_EQ(s.fields[0].encoding, STK_ENC_NONE);
  CHECK(!memcmp(s.fields[0].data, x, sizeof x));
  CHECK_STR(s.fields[1].name, "y");
  CHECK_EQ(s.fields[1].encoding, STK_ENC_DEFLATE);
  CHECK_EQ(s.fields[1].raw_len, sizeof y);
  CHECK(s.fields[1].len < sizeof y);
  CHECK_STR(s.key, "a");
  stk_dataset_close(ds);
  /* Corrupt the deflated data (just after its local header) and the stored one. */
  flip_byte("d/a.npz", 35 + sizeof x + 35 + 3);
  ds = open_ds("d", NULL);
  int rc = stk_dataset_read(ds, 0, 1, &buf, &cap, &s);
  CHECK_MSG(rc == STK_ECRC || rc == STK_EFORMAT, "rc %d", rc);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "d/a.npz: offset 335");
  CHECK_OK(stk_dataset_read(ds, 0, 0, &buf, &cap, &s));
  stk_dataset_close(ds);
  flip_byte("d/a.npz", 35 + sizeof x + 35 + 3);
  flip_byte("d/a.npz", 35 + 200);
  ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_read(ds, 0, 1, &buf, &cap, &s), STK_ECRC);
  CHECK_CONTAINS(stk_dataset_errmsg(ds), "d/a.npz: offset 0: zip member CRC32 mismatch");
  free(buf);
  stk_dataset_close(ds);
  char err[STK_ERRMSG_MAX];
  test_write_file("d/a.npz", zip, n - 10);
  CHECK_EQ(open_err("d", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "d/a.npz");
}

/* np.savez / savez_compressed files read back, and ours load in NumPy. */
TEST(format_npz_numpy_interop) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0) SKIP("no NumPy");
  char *out;
  int rc = test_sh(&out, "mkdir -p d && /usr/bin/python3 -c \"import numpy as np\n"
                         "np.savez('d/a.npz', x=np.arange(1000,dtype=np.uint8), y=np.array([3]))\n"
                         "np.savez_compressed('d/b.npz', x=np.zeros((64,64),np.float32), y=np.array([4]))\"");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  struct stk_dataset *ds = open_ds("d", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  CHECK_OK(stk_dataset_read(ds, 0, 1, &buf, &cap, &s));
  CHECK_EQ(s.label, 3);
  CHECK_EQ(s.fields[0].encoding, STK_ENC_NONE);
  CHECK_OK(stk_dataset_read(ds, 1, 1, &buf, &cap, &s));
  CHECK_EQ(s.fields[0].encoding, STK_ENC_DEFLATE);
  CHECK_EQ(s.label, 4); /* y is deflated (savez_compressed): read all the same */
  free(buf);
  stk_dataset_close(ds);
  write_ds("npz", "o", 3, "x", 1, 0);
  rc = test_sh(&out, "/usr/bin/python3 -c \"import numpy as np\n"
                     "z=np.load('o/shard-00000002.npz'); print(sorted(z.files), z['label'][0], z['x'].shape)\"");
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_CONTAINS(out, "['label', 'x'] 2");
  free(out);
}

/* Gather a field into a fresh buffer (strided fields element by element). */
static uint8_t *field_bytes(const struct stk_field *f, uint64_t *n) {
  if (f->encoding != STK_ENC_STRIDED) {
    *n = f->len;
    uint8_t *p = malloc(f->len);
    memcpy(p, f->data, f->len);
    return p;
  }
  *n = f->raw_len;
  uint8_t *p = malloc(f->raw_len);
  for (uint64_t k = 0; k < f->raw_len / f->elem; k++)
    memcpy(p + k * f->elem, f->data + k * f->stride, f->elem);
  return p;
}

/* DLIO's npz layout as NumPy writes it (np.savez(path, x=records, y=labels),
 * samples along x's last axis): each file holds its samples, sample i is
 * x[..., i] (C and Fortran order, 1- and 4-byte elements) with label y[i];
 * a single-sample file and savez_compressed labels are read too. */
TEST(format_npz_dlio_layout_numpy) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0)
    SKIP("no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test installs python3-numpy)");
  char *out;
  int rc = test_sh(&out, "mkdir -p d b && /usr/bin/python3 -c \"import numpy as np\n"
                         "r=np.random.default_rng(7)\n"
                         "xs=[r.integers(0,255,size=(5,7,3),dtype=np.uint8),\n"
                         "    r.random((4,3,2,4),dtype=np.float32),\n"
                         "    np.asfortranarray(r.integers(0,255,size=(6,5,2),dtype=np.uint8)),\n"
                         "    r.integers(0,255,size=(9,9,1),dtype=np.uint8)]\n"
                         "k=0\n"
                         "for f,x in enumerate(xs):\n"
                         "  y=[100*f+i for i in range(x.shape[-1])]\n"
                         "  np.savez('d/f%%d.npz'%%f, x=x, y=y)\n"
                         "  for i in range(x.shape[-1]):\n"
                         "    open('b/%%d.bin'%%k,'wb').write(x[...,i].tobytes(order='A')); k+=1\n"
                         "np.savez_compressed('d/f4.npz', x=np.zeros((8,8,1),np.uint8), y=np.array([42]))\"");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  struct stk_dataset *ds = open_ds("d", NULL);
  CHECK_EQ(stk_dataset_num_samples(ds), 3 + 4 + 2 + 1 + 1);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  int32_t want[] = {0, 1, 2, 100, 101, 102, 103, 200, 201};
  for (uint64_t i = 0; i < 9; i++) {
    CHECK_OK(stk_dataset_read(ds, i, 1, &buf, &cap, &s));
    CHECK_EQ(s.label, want[i]);
    CHECK_EQ(s.nfields, 1);
    CHECK_STR(s.fields[0].name, "x");
    char path[64];
    snprintf(path, sizeof path, "b/%llu.bin", (unsigned long long)i);
    size_t wl;
    uint8_t *w = test_read_file(path, &wl), *got;
    uint64_t gl;
    got = field_bytes(&s.fields[0], &gl);
    CHECK_EQ(gl, wl);
    CHECK_MSG(!memcmp(got, w, wl), "sample %llu differs from numpy's x[..., i]", (unsigned long long)i);
    free(got);
    free(w);
  }
  /* Fortran order: contiguous, but array data without a .npy header of its
   * own, so a one-element strided field (the npy decoder's business). */
  CHECK_EQ(s.fields[0].encoding, STK_ENC_STRIDED);
  CHECK_EQ(s.fields[0].elem, s.fields[0].raw_len);
  CHECK_OK(stk_dataset_read(ds, 1, 1, &buf, &cap, &s));
  CHECK_EQ(s.fields[0].encoding, STK_ENC_STRIDED);
  CHECK_OK(stk_dataset_read(ds, 9, 1, &buf, &cap, &s)); /* one sample: x and y as fields */
  CHECK_EQ(s.label, 300);
  CHECK_OK(stk_dataset_read(ds, 10, 1, &buf, &cap, &s)); /* savez_compressed's y */
  CHECK_EQ(s.label, 42);
  /* A damaged byte of x is caught when its sample is read. */
  free(buf);
  stk_dataset_close(ds);
}

/* DLIO's npz layout written by the stdlib (no NumPy needed): a .npy
 * header and the array bytes in each member. */
static void write_dlio_npz(const char *path, const char *x_hdr, const char *x_py, const char *y_hdr,
                           const char *y_py) {
  char *out = NULL;
  int rc = test_sh(&out,
                   "/usr/bin/python3 -c \"import struct, zipfile\n"
                   "def npy(h, data):\n"
                   "  h += ' ' * (63 - (10 + len(h)) %% 64) + '\\n'\n"
                   "  return b'\\x93NUMPY\\x01\\x00' + struct.pack('<H', len(h)) + h.encode() + data\n"
                   "with zipfile.ZipFile('%s', 'w') as z:\n"
                   "  z.writestr('x.npy', npy(\\\"%s\\\", %s))\n"
                   "  z.writestr('y.npy', npy(\\\"%s\\\", %s))\"",
                   path, x_hdr, x_py, y_hdr, y_py);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
}

/* DLIO npz labels are int64: a value outside what a label carries (0 to
 * 2^31-1, -1 for none) fails the open naming it, where it used to become
 * -1 without a word; a Fortran-order x decodes with decode npy (it failed
 * with "no \x93NUMPY magic": the sample is array data, not a .npy file)
 * (issue 18, section 6). */
TEST(format_npz_dlio_labels_range_and_fortran_npy) {
  mkdir("big", 0755);
  mkdir("neg", 0755);
  mkdir("ok", 0755);
  mkdir("fort", 0755);
  const char *x = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }";
  write_dlio_npz("big/a.npz", x, "bytes(range(6))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 1, 2**32, 3)");
  write_dlio_npz("neg/a.npz", x, "bytes(range(6))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 1, -5, 3)");
  write_dlio_npz("ok/a.npz", x, "bytes(range(6))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 7, -1, 2**31-1)");
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(open_err("big", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "big/a.npz: offset ");
  CHECK_CONTAINS(err, "y[1]: label 4294967296 is outside the labels stoker carries (0 to 2^31-1, or -1 for none)");
  CHECK_EQ(open_err("neg", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "y[1]: label -5 is outside");
  struct stk_dataset *ds = open_ds("ok", NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  struct stk_sample s;
  int32_t want[] = {7, -1, INT32_MAX};
  for (uint64_t i = 0; i < 3; i++) {
    CHECK_OK(stk_dataset_read(ds, i, 1, &buf, &cap, &s));
    CHECK_EQ(s.label, want[i]);
  }
  free(buf);
  stk_dataset_close(ds);
  /* x of shape (2, 2, 3) in Fortran order: x[..., i] is bytes 4i..4i+3. */
  write_dlio_npz("fort/a.npz", "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2, 3), }",
                 "bytes(range(12))", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                 "struct.pack('<3q', 0, 1, 2)");
  ds = open_ds("fort", NULL);
  for (int kind = STK_DECODE_RAW; kind <= STK_DECODE_NPY; kind += STK_DECODE_NPY - STK_DECODE_RAW) {
    struct stk_loader_opts o = {.batch_size = 3, .threads = 1};
    struct stk_decode_cfg dc = {0};
    o.decode = &dc;
    dc.kind = kind;
    struct stk_loader *l = NULL;
    CHECK_OK(stk_loader_open(&l, ds, &o, err));
    struct stk_batch *b;
    int rc = stk_loader_next(l, &b);
    CHECK_MSG(rc == 0, "decode %d: %s", kind, stk_loader_errmsg(l));
    CHECK_EQ(b->n, 3);
    for (uint32_t i = 0; i < 3; i++) {
      uint64_t id = b->indices[i];
      CHECK_EQ(b->len[i], 4);
      for (int k = 0; k < 4; k++) CHECK_EQ(b->data[b->offsets[i] + k], 4 * id + k);
      CHECK_EQ(b->labels[i], (int32_t)id);
    }
    stk_batch_release(l, b);
    stk_loader_close(l);
  }
  stk_dataset_close(ds);
}

/* gen writes DLIO's npz layout, which NumPy loads as DLIO does: x of shape
 * (H, W, N) holding N samples along its last axis, y their int64 labels;
 * stoker reads sample i as x[..., i]. */
TEST(format_gen_npz_dlio_layout_numpy) {
  if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy'") != 0)
    SKIP("no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test installs python3-numpy)");
  struct stk_gen_opts g = {.dir = "z", .format = "npz", .samples = 10, .size_mean = 700,
                           .classes = 5, .samples_per_shard = 4, .seed = 2};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk_gen(&g, NULL, NULL, err));
  char *out;
  int rc = test_sh(&out, "mkdir -p b && /usr/bin/python3 -c \"import numpy as np, glob\n"
                         "k=0\n"
                         "for p in sorted(glob.glob('z/*.npz')):\n"
                         "  z=np.load(p); x=z['x']; y=z['y']\n"
                         "  assert x.dtype==np.uint8 and x.ndim==3 and y.dtype==np.int64 and y.shape==(x.shape[2],)\n"
                         "  for i in range(x.shape[2]):\n"
                         "    open('b/%%d.bin'%%k,'wb').write(x[...,i].tobytes()); open('b/%%d.y'%%k,'w').write(str(y[i])); k+=1\n"
                         "print(k, 'samples')\"");
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_CONTAINS(out, "10 samples");
  free(out);
  struct stk_dataset *ds = open_ds("z", NULL);
  CHECK_EQ(stk_dataset_num_shards(ds), 3);
  CHECK_EQ(stk_dataset_num_samples(ds), 10);
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (uint64_t i = 0; i < 10; i++) {
    struct stk_sample s;
    CHECK_OK(stk_dataset_read(ds, i, 1, &buf, &cap, &s));
    char p[64];
    size_t wl, yl;
    snprintf(p, sizeof p, "b/%llu.bin", (unsigned long long)i);
    uint8_t *w = test_read_file(p, &wl);
    snprintf(p, sizeof p, "b/%llu.y", (unsigned long long)i);
    char *y = (char *)test_read_file(p, &yl);
    uint64_t gl;
    uint8_t *got = field_bytes(&s.fields[0], &gl);
    CHECK_EQ(gl, wl);
    CHECK(!memcmp(got, w, wl));
    CHECK_EQ(s.label, atoi(y));
    free(got);
    free(w);
    free(y);
  }
  free(buf);
  stk_dataset_close(ds);
}
