/* Megatron-LM's GPT sample windows and blends, rebuilt in C: NumPy's legacy
 * RandomState stream, the document, sample and shuffle indices, the blend
 * indices and resume arithmetic, each checked against a reference that a
 * short NumPy script in the test computes independently of the C code. */
#include <float.h>
#include <math.h>
#include <unistd.h>

#include "stoker/error.h"

#include "../src/loader/gpt_index.h"
#include "../src/loader/mt19937.h"
#include "test.h"

#define NEED_NUMPY()                                                                        \
  do {                                                                                      \
    if (test_sh(NULL, "/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)           \
      SKIP(                                                                                 \
          "no NumPy (/usr/bin/python3 -c 'import numpy' failed; scripts/install-deps test " \
          "installs python3-numpy)");                                                       \
  } while (0)

/* Run a Python script (written to ref.py) in the test's directory. */
static void run_py(const char *script) {
  test_write_file("ref.py", script, strlen(script));
  char *out = NULL;
  int rc = test_sh(&out, "/usr/bin/python3 ref.py");
  CHECK_MSG(rc == 0, "ref.py failed (%d): %s", rc, out ? out : "");
  free(out);
}

/* Read a raw little-endian array the script wrote; *n elements of size es. */
static void *read_arr(const char *path, size_t es, uint64_t *n) {
  size_t len = 0;
  uint8_t *p = test_read_file(path, &len);
  CHECK_MSG(p != NULL, "cannot read %s", path);
  CHECK_EQ(len % es, 0);
  *n = len / es;
  return p;
}

/* ---- NumPy's legacy MT19937 ------------------------------------------- */

static const uint32_t seeds[] = {0, 1, 1234, 5489, 0xdeadbeefu, 0xffffffffu};

/* The state after seeding, the raw 32-bit stream and the 64-bit masked
 * draws (randint over uint64 with a range past 2^32 takes the same path as
 * random_interval's 64-bit branch) for several seeds. */
TEST(gpt_mt19937_matches_numpy) {
  NEED_NUMPY();
  run_py(
      "import numpy as np\n"
      "for s in [0, 1, 1234, 5489, 0xdeadbeef, 0xffffffff]:\n"
      "    rs = np.random.RandomState(s)\n"
      "    st = rs.get_state()\n"
      "    assert st[2] == 624\n"
      "    st[1].astype('<u4').tofile('key-%d' % s)\n"
      "    rs.randint(0, 2**32, size=3000, dtype=np.uint32).astype('<u4').tofile('raw-%d' % s)\n"
      "    rs.randint(0, 1001, size=500, dtype=np.uint32).astype('<u4').tofile('small-%d' % s)\n"
      "    rs.randint(0, 3 * 2**33 + 6, size=500, dtype=np.uint64).astype('<u8').tofile('big-%d' % "
      "s)\n");
  for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
    uint32_t s = seeds[k];
    char path[64];
    uint64_t n;
    struct stk__mt19937 mt;
    stk__mt_seed(&mt, s);
    snprintf(path, sizeof path, "key-%u", s);
    uint32_t *key = read_arr(path, 4, &n);
    CHECK_EQ(n, STK__MT_N);
    for (int i = 0; i < STK__MT_N; i++) CHECK_MSG(mt.key[i] == key[i], "seed %u key[%d]", s, i);
    free(key);
    snprintf(path, sizeof path, "raw-%u", s);
    uint32_t *raw = read_arr(path, 4, &n);
    CHECK_EQ(n, 3000);
    for (uint64_t i = 0; i < n; i++) {
      uint32_t v = stk__mt_next32(&mt);
      CHECK_MSG(v == raw[i], "seed %u output %" PRIu64 ": %u != %u", s, i, v, raw[i]);
    }
    free(raw);
    snprintf(path, sizeof path, "small-%u", s);
    uint32_t *sm = read_arr(path, 4, &n);
    for (uint64_t i = 0; i < n; i++) CHECK_EQ(stk__mt_interval(&mt, 1000), sm[i]);
    free(sm);
    snprintf(path, sizeof path, "big-%u", s);
    uint64_t *big = read_arr(path, 8, &n);
    CHECK_EQ(n, 500);
    for (uint64_t i = 0; i < n; i++) {
      uint64_t v = stk__mt_interval(&mt, 3ull * (1ull << 33) + 5);
      CHECK_MSG(v == big[i], "seed %u 64-bit draw %" PRIu64 ": %" PRIu64 " != %" PRIu64, s, i, v,
                big[i]);
    }
    free(big);
  }
}

/* RandomState.shuffle of int32, uint32 and int64 ranges of 0, 1, 2, 1000
 * and 2^20 elements, several seeds, two shuffles in a row on one state. */
TEST(gpt_shuffle_matches_numpy) {
  NEED_NUMPY();
  run_py(
      "import numpy as np\n"
      "for s in [0, 1, 1234, 0xffffffff]:\n"
      "    for n in [0, 1, 2, 1000, 1 << 20]:\n"
      "        rs = np.random.RandomState(s)\n"
      "        a = np.arange(n, dtype=np.int32); rs.shuffle(a)\n"
      "        b = np.arange(n, dtype=np.uint32) + 7; rs.shuffle(b)\n"
      "        c = np.arange(n, dtype=np.int64) * 3; rs.shuffle(c)\n"
      "        a.astype('<i4').tofile('a-%d-%d' % (s, n))\n"
      "        b.astype('<u4').tofile('b-%d-%d' % (s, n))\n"
      "        c.astype('<i8').tofile('c-%d-%d' % (s, n))\n");
  static const uint32_t ss[] = {0, 1, 1234, 0xffffffffu};
  static const uint64_t ns[] = {0, 1, 2, 1000, 1u << 20};
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 5; j++) {
      uint32_t s = ss[i];
      uint64_t n = ns[j], m;
      int32_t *a = malloc(n * 4 + 4);
      uint32_t *b = malloc(n * 4 + 4);
      int64_t *c = malloc(n * 8 + 8);
      for (uint64_t k = 0; k < n; k++) {
        a[k] = (int32_t)k;
        b[k] = (uint32_t)k + 7;
        c[k] = (int64_t)k * 3;
      }
      struct stk__mt19937 mt;
      stk__mt_seed(&mt, s);
      stk__mt_shuffle_i32(&mt, a, n);
      stk__mt_shuffle_u32(&mt, b, n);
      stk__mt_shuffle_i64(&mt, c, n);
      char path[64];
      snprintf(path, sizeof path, "a-%u-%" PRIu64, s, n);
      void *ra = read_arr(path, 4, &m);
      CHECK_EQ(m, n);
      CHECK_MSG(n == 0 || memcmp(ra, a, n * 4) == 0, "int32 shuffle seed %u n %" PRIu64, s, n);
      snprintf(path, sizeof path, "b-%u-%" PRIu64, s, n);
      void *rb = read_arr(path, 4, &m);
      CHECK_MSG(n == 0 || memcmp(rb, b, n * 4) == 0, "uint32 shuffle seed %u n %" PRIu64, s, n);
      snprintf(path, sizeof path, "c-%u-%" PRIu64, s, n);
      void *rc = read_arr(path, 8, &m);
      CHECK_MSG(n == 0 || memcmp(rc, c, n * 8) == 0, "int64 shuffle seed %u n %" PRIu64, s, n);
      free(ra), free(rb), free(rc), free(a), free(b), free(c);
    }
}

/* The 64-bit branch of random_interval, by hand: with max = 2^32 the mask
 * is 2^33 - 1, so each draw is (hi << 32 | lo) & mask, i.e. bit 0 of the
 * first output above the second output, rejected while above 2^32. */
TEST(gpt_interval_64bit_branch) {
  struct stk__mt19937 a, b;
  stk__mt_seed(&a, 42);
  stk__mt_seed(&b, 42);
  for (int i = 0; i < 100; i++) {
    uint64_t want;
    do {
      uint64_t hi = stk__mt_next32(&b), lo = stk__mt_next32(&b);
      want = ((hi & 1) << 32) | lo;
    } while (want > (1ull << 32));
    CHECK_EQ(stk__mt_interval(&a, 1ull << 32), want);
  }
  /* max 0 draws nothing; max 2^32 - 1 takes exactly one 32-bit output */
  stk__mt_seed(&a, 7);
  stk__mt_seed(&b, 7);
  CHECK_EQ(stk__mt_interval(&a, 0), 0);
  CHECK_EQ(stk__mt_interval(&a, 0xffffffffu), stk__mt_next32(&b));
  CHECK_EQ(stk__mt_next32(&a), stk__mt_next32(&b));
}

/* ---- the document, sample and shuffle indices -------------------------- */

/* Megatron's GPTDataset index build, restated in NumPy from its semantics
 * (megatron-core 0.16.1's gpt_dataset.py and helpers.cpp) and computed a
 * different way where it can be: a sample-index row is found from the
 * global token position of its window (searchsorted over the document
 * index's cumulative lengths), not by walking documents as the C does.
 * cases.txt lists each case; its arrays go to files named after it. */
static const char gpt_ref_py[] =
    "import numpy as np\n"
    "I32 = np.iinfo(np.int32).max\n"
    "def megatron(lengths, docs, seq, num_samples, seed, extra, drop_last):\n"
    "    T = int(np.sum(lengths[docs]))\n"
    "    E = 1\n"
    "    if num_samples is not None:\n"
    "        while E * T < num_samples * seq + extra: E += 1\n"
    "    sep = False\n"
    "    if E > 1:\n"
    "        sans = ((E - 1) * T - extra) // seq\n"
    "        per = (T - extra) // seq\n"
    "        last = num_samples - sans\n"
    "        assert 0 <= last <= per + 1\n"
    "        sep = last < int(0.80 * per)\n"
    "    rs = np.random.RandomState(seed)\n"
    "    def epochs(k):\n"
    "        d = np.tile(docs, k).astype(np.int32); rs.shuffle(d); return d\n"
    "    di = np.concatenate((epochs(E - 1), epochs(1))) if sep else epochs(E)\n"
    "    t = E * T - extra\n"
    "    n = t // seq if drop_last else int(np.ceil(np.float32(t) / np.float32(seq)))\n"
    "    cum = np.cumsum(lengths[di].astype(np.int64))\n"
    "    g = np.arange(1, n + 1, dtype=np.int64) * seq + extra - 1\n"
    "    pos = np.searchsorted(cum, g, side='right')\n"
    "    past = pos >= len(di)\n"
    "    pos[past] = len(di) - 1\n"
    "    start = cum[pos] - lengths[di[pos]]\n"
    "    off = g - start + 1 - extra\n"
    "    off[past] = lengths[di[-1]] - extra\n"
    "    si = np.zeros((n + 1, 2), dtype=np.int64)\n"
    "    si[1:, 0] = pos; si[1:, 1] = off\n"
    "    si = si.astype(np.int32 if max(len(di), lengths.max()) <= I32 else np.int64)\n"
    "    st = np.uint32 if n < np.iinfo(np.uint32).max - 1 else np.int64\n"
    "    head = sans if sep else n\n"
    "    a = np.arange(0, head, dtype=st); rs.shuffle(a)\n"
    "    b = np.arange(head, n, dtype=st); rs.shuffle(b)\n"
    "    return E, sep, di, si, np.concatenate((a, b)) if head != n else a\n"
    "g = np.random.RandomState(99)\n"
    "corpora = {\n"
    "    'a': g.randint(1, 300, size=1000).astype(np.int32),\n"
    "    'z': np.where(g.rand(3000) < 0.2, 0, g.randint(1, 5000, size=3000)).astype(np.int32),\n"
    "    'one': np.array([10], dtype=np.int32),\n"
    "    'exact': np.full(50, 65, dtype=np.int32),\n"
    "    'big': g.randint(1, 2000, size=200000).astype(np.int32),\n"
    "}\n"
    "cases = [  # name corpus first last seq num_samples seed extra drop_last\n"
    "    ('one_epoch', 'a', 0, 1000, 64, None, 1234, 1, 1),\n"
    "    ('split_sep', 'a', 100, 900, 128, 2800, 1234, 1, 1),\n"
    "    ('split_nosep', 'a', 100, 900, 128, 3600, 7, 1, 1),\n"
    "    ('four_epochs_sep', 'a', 0, 1000, 50, 8982, 3, 1, 1),\n"
    "    ('no_extra', 'a', 0, 1000, 100, 4000, 5, 0, 1),\n"
    "    ('keep_last', 'a', 0, 1000, 37, None, 6, 1, 0),\n"
    "    ('keep_last_no_extra', 'a', 0, 1000, 37, None, 8, 0, 0),\n"
    "    ('zeros_long', 'z', 0, 3000, 16, None, 0, 1, 1),\n"
    "    ('zeros_epochs', 'z', 500, 2500, 4096, 3000, 0xffffffff, 1, 1),\n"
    "    ('tiny_many_epochs', 'one', 0, 1, 3, 20, 1, 1, 1),\n"
    "    ('exact_docs', 'exact', 0, 50, 64, 120, 11, 1, 1),\n"
    "    ('exact_docs_no_extra', 'exact', 0, 50, 65, None, 12, 0, 1),\n"
    "    ('big_two_epochs', 'big', 0, 200000, 256, 1500000, 1234, 1, 1),\n"
    "]\n"
    "with open('cases.txt', 'w') as f:\n"
    "    for name, c, lo, hi, seq, ns, seed, extra, dl in cases:\n"
    "        L = corpora[c]\n"
    "        L.astype('<i4').tofile('len-' + name)\n"
    "        docs = np.arange(lo, hi, dtype=np.int32)\n"
    "        E, sep, di, si, sh = megatron(L, docs, seq, ns, seed, extra, dl)\n"
    "        di.astype('<i4').tofile('doc-' + name)\n"
    "        si.tofile('sample-' + name)\n"
    "        sh.tofile('shuffle-' + name)\n"
    "        f.write('%s %d %d %d %d %d %d %d %d %d %d %d %d\\n' % (name, lo, hi, seq, ns or 0,\n"
    "                seed, extra, dl, E, int(sep), si.dtype.itemsize, sh.dtype.itemsize, "
    "len(sh)))\n";

struct gpt_case {
  char name[64];
  int lo, hi, seq, extra, drop_last, epochs, sep, sample_es, shuffle_es;
  unsigned long long num_samples, seed, n;
};

/* Every token of window k, found through the window (the O(1) resume
 * path), is the next stretch of the document index's token stream from
 * global position sample * seq_len: the pieces are contiguous in that
 * stream, stay inside their documents and hold seq_len + extra tokens, or
 * what is left of the stream for a kept partial window. */
static void check_windows(const struct stk__gpt_index *ix, const int32_t *len) {
  int64_t *cum = malloc((ix->n_doc + 1) * sizeof *cum);
  cum[0] = 0;
  for (uint64_t i = 0; i < ix->n_doc; i++) cum[i + 1] = cum[i] + len[ix->doc_index[i]];
  int64_t total = cum[ix->n_doc];
  uint64_t cap = 16;
  struct stk__gpt_piece *pc = malloc(cap * sizeof *pc);
  char err[STK_ERRMSG_MAX];
  for (uint64_t k = 0; k < ix->n_samples; k++) {
    struct stk__gpt_window w;
    CHECK_OK(stk__gpt_window(ix, k, &w, err));
    uint64_t np = stk__gpt_window_pieces(ix, len, &w, pc, cap);
    if (np > cap) {
      cap = np;
      pc = realloc(pc, cap * sizeof *pc);
      CHECK_EQ(stk__gpt_window_pieces(ix, len, &w, pc, cap), np);
    }
    int64_t g = (int64_t)w.sample * ix->seq_len, want = ix->seq_len + ix->extra, got = 0;
    if (g + want > total) want = total - g;
    for (uint64_t j = 0; j < np; j++) {
      int64_t pos = w.pos_begin + (int64_t)j;
      CHECK_EQ(pc[j].doc, ix->doc_index[pos]);
      CHECK_MSG(pc[j].offset >= 0 && pc[j].len >= 0 && pc[j].offset + pc[j].len <= len[pc[j].doc],
                "window %" PRIu64 " piece %" PRIu64 " leaves its document", k, j);
      if (pc[j].len > 0)
        CHECK_MSG(cum[pos] + pc[j].offset == g + got,
                  "window %" PRIu64 " piece %" PRIu64 " is not where the stream continues", k, j);
      got += pc[j].len;
    }
    CHECK_MSG(got == want,
              "window %" PRIu64 " (sample %" PRIu64 ") has %" PRId64 " tokens, expected %" PRId64,
              k, w.sample, got, want);
  }
  free(pc);
  free(cum);
  CHECK_EQ(stk__gpt_window(ix, ix->n_samples, &(struct stk__gpt_window){0}, err), STK_ERANGE);
}

TEST(gpt_index_matches_numpy_reference) {
  NEED_NUMPY();
  run_py(gpt_ref_py);
  FILE *f = fopen("cases.txt", "r");
  CHECK(f != NULL);
  struct gpt_case c;
  int n_cases = 0, n_sep = 0, n_multi = 0;
  while (fscanf(f, "%63s %d %d %d %llu %llu %d %d %d %d %d %d %llu", c.name, &c.lo, &c.hi, &c.seq,
                &c.num_samples, &c.seed, &c.extra, &c.drop_last, &c.epochs, &c.sep, &c.sample_es,
                &c.shuffle_es, &c.n) == 13) {
    char path[128], err[STK_ERRMSG_MAX] = "";
    uint64_t n_len, m;
    snprintf(path, sizeof path, "len-%s", c.name);
    int32_t *len = read_arr(path, 4, &n_len);
    int32_t *docs = malloc((size_t)(c.hi - c.lo) * sizeof *docs);
    for (int i = c.lo; i < c.hi; i++) docs[i - c.lo] = i;
    struct stk__gpt_cfg cfg = {.lengths = len,
                               .n_lengths = n_len,
                               .docs = docs,
                               .n_docs = (uint64_t)(c.hi - c.lo),
                               .seq_len = c.seq,
                               .num_samples = c.num_samples,
                               .seed = (uint32_t)c.seed,
                               .no_extra_token = !c.extra,
                               .keep_last_partial = !c.drop_last};
    struct stk__gpt_index ix;
    int rc = stk__gpt_index_build(&cfg, &ix, err);
    CHECK_MSG(rc == 0, "%s: %s", c.name, err);
    CHECK_MSG(ix.num_epochs == (uint32_t)c.epochs, "%s: %u epochs, expected %d", c.name,
              ix.num_epochs, c.epochs);
    CHECK_MSG(ix.separate_final_epoch == c.sep, "%s: separate_final_epoch", c.name);
    snprintf(path, sizeof path, "doc-%s", c.name);
    int32_t *di = read_arr(path, 4, &m);
    CHECK_MSG(m == ix.n_doc && memcmp(di, ix.doc_index, m * 4) == 0, "%s: document index", c.name);
    snprintf(path, sizeof path, "sample-%s", c.name);
    CHECK_EQ(ix.sample_i64 ? 8 : 4, c.sample_es);
    void *si = read_arr(path, (size_t)c.sample_es, &m);
    CHECK_MSG(m == 2 * (ix.n_samples + 1), "%s: %" PRIu64 " sample rows, expected %" PRIu64, c.name,
              ix.n_samples + 1, m / 2);
    for (uint64_t r = 0; r <= ix.n_samples; r++) {
      int64_t a, b;
      stk__gpt_sample_row(&ix, r, &a, &b);
      int64_t ea = c.sample_es == 4 ? ((int32_t *)si)[2 * r] : ((int64_t *)si)[2 * r];
      int64_t eb = c.sample_es == 4 ? ((int32_t *)si)[2 * r + 1] : ((int64_t *)si)[2 * r + 1];
      CHECK_MSG(a == ea && b == eb,
                "%s: sample row %" PRIu64 " is (%" PRId64 ", %" PRId64 "), expected (%" PRId64
                ", %" PRId64 ")",
                c.name, r, a, b, ea, eb);
    }
    snprintf(path, sizeof path, "shuffle-%s", c.name);
    CHECK_EQ(ix.shuffle_i64 ? 8 : 4, c.shuffle_es);
    void *sh = read_arr(path, (size_t)c.shuffle_es, &m);
    CHECK_MSG(m == ix.n_samples && m == c.n, "%s: shuffle index length", c.name);
    CHECK_MSG(m == 0 || memcmp(sh, ix.shuffle_index, m * (size_t)c.shuffle_es) == 0,
              "%s: shuffle index", c.name);
    check_windows(&ix, len);
    stk__gpt_index_free(&ix);
    free(len), free(docs), free(di), free(si), free(sh);
    n_cases++;
    n_sep += c.sep;
    n_multi += c.epochs > 1 && !c.sep;
  }
  fclose(f);
  CHECK_EQ(n_cases, 13);
  CHECK_MSG(n_sep >= 3 && n_multi >= 2, "the cases cover both final-epoch rules (%d, %d)", n_sep,
            n_multi);
}

/* Bad input is refused with a sentence naming what is wrong. */
TEST(gpt_index_refuses_bad_input) {
  int32_t len[4] = {5, 0, 7, 3}, docs[2] = {0, 2}, bad[2] = {0, 4}, empty[2] = {1, 1};
  int32_t neg[2] = {5, -1};
  char err[STK_ERRMSG_MAX];
  struct stk__gpt_index ix;
  struct stk__gpt_cfg c = {.lengths = len, .n_lengths = 4, .docs = docs, .n_docs = 2, .seq_len = 0};
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_EINVAL);
  CHECK_CONTAINS(err, "seq_len must be at least 1");
  CHECK(ix.doc_index == NULL && ix.sample_index == NULL && ix.shuffle_index == NULL);
  c.seq_len = 4;
  c.n_lengths = 0;
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_EEMPTY);
  CHECK_CONTAINS(err, "corpus has no documents");
  c.n_lengths = 4;
  c.n_docs = 0;
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_EEMPTY);
  CHECK_CONTAINS(err, "split has no documents");
  c.docs = bad, c.n_docs = 2;
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_ERANGE);
  CHECK_CONTAINS(err, "document id 4, outside the corpus (4 documents)");
  c.docs = empty;
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_EEMPTY);
  CHECK_CONTAINS(err, "hold no tokens");
  c.lengths = neg, c.n_lengths = 2, c.docs = NULL;
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_ERANGE);
  CHECK_CONTAINS(err, "document 1 has a negative length");
  c.lengths = len, c.n_lengths = 4, c.docs = docs;
  c.num_samples = UINT64_MAX / 2;
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_ERANGE);
  CHECK_CONTAINS(err, "overflow");
  c.num_samples = 1ull << 33; /* 2^35 tokens of a 12-token split: 2.9e9 epochs */
  CHECK_EQ(stk__gpt_index_build(&c, &ix, err), STK_ERANGE);
  CHECK_CONTAINS(err, "epochs");
  /* docs NULL means the whole corpus; a split too short for one window has
   * no samples, which is not an error (Megatron builds it too) */
  c.num_samples = 0, c.docs = NULL, c.seq_len = 100;
  CHECK_OK(stk__gpt_index_build(&c, &ix, err));
  CHECK_EQ(ix.n_samples, 0);
  CHECK_EQ(ix.tokens_per_epoch, 15);
  CHECK_EQ(stk__gpt_window(&ix, 0, &(struct stk__gpt_window){0}, err), STK_ERANGE);
  CHECK_CONTAINS(err, "past the last");
  stk__gpt_index_free(&ix);
}

/* ---- blends --------------------------------------------------------------- */

/* BlendedDataset's indices restated in Python: for each sample the source
 * whose count lags weight * max(i, 1) most (the first on ties), weights
 * normalized as Megatron's normalize() does with NumPy, twice for a
 * weighted blend (builder, then BlendedDataset); the exhaustive variant
 * over the sources not yet spent; the builder's per-source sizes. */
static const char blend_ref_py[] =
    "import math, numpy as np\n"
    "def normalize(w):\n"
    "    w = np.array(w, dtype=np.float64); return (w / np.sum(w)).tolist()\n"
    "def blend(w, size):\n"
    "    taken = [0] * len(w); di = []; dsi = []\n"
    "    for i in range(size):\n"
    "        at = max(float(i), 1.0)\n"
    "        e = [w[s] * at - taken[s] for s in range(len(w))]\n"
    "        best = max(range(len(w)), key=lambda s: (e[s], -s))\n"
    "        di.append(best); dsi.append(taken[best]); taken[best] += 1\n"
    "    return np.array(di, np.int16), np.array(dsi, np.int64)\n"
    "def exhaustive(sizes):\n"
    "    total = sum(sizes); w = [s / total for s in sizes]\n"
    "    taken = [0] * len(sizes); live = list(range(len(sizes))); di = []; dsi = []; i = 0\n"
    "    while live:\n"
    "        at = max(float(i), 1.0)\n"
    "        best = max(live, key=lambda s: (w[s] * at - taken[s], -s))\n"
    "        di.append(best); dsi.append(taken[best]); taken[best] += 1\n"
    "        if taken[best] == sizes[best]: live.remove(best)\n"
    "        i += 1\n"
    "    return np.array(di, np.int16), np.array(dsi, np.int64)\n"
    "g = np.random.RandomState(5)\n"
    "blends = [('b37', [0.3, 0.7], 20000), ('b123', [1, 2, 3], 10001), ('b5', list(g.rand(5) + "
    "0.01), 5000),\n"
    "          ('b9', list(g.rand(9) * 10), 3000), ('b200', list(g.rand(200) + 1e-3), 2000),\n"
    "          ('b1', [2.5], 10), ('b0', [0.5, 0.5], 0)]\n"
    "with open('blends.txt', 'w') as f:\n"
    "    for name, w, size in blends:\n"
    "        once = normalize(w); twice = normalize(once)\n"
    "        np.array(w, '<f8').tofile('w-' + name)\n"
    "        np.array(once, '<f8').tofile('once-' + name)\n"
    "        np.array(twice, '<f8').tofile('twice-' + name)\n"
    "        di, dsi = blend(twice, size)\n"
    "        di.astype('<i2').tofile('di-' + name); dsi.astype('<i8').tofile('dsi-' + name)\n"
    "        target = size * 3 + 1\n"
    "        src = [int(math.ceil(math.ceil(target * x) * (1 + 0.005))) for x in once]\n"
    "        np.array(src, '<u8').tofile('src-' + name)\n"
    "        f.write('%s %d %d %d %d\\n' % (name, len(w), size, target,\n"
    "                sum(int(math.ceil(target * x)) for x in once)))\n"
    "di, dsi = exhaustive([5, 7, 13, 1])\n"
    "di.astype('<i2').tofile('di-exh'); dsi.astype('<i8').tofile('dsi-exh')\n";

TEST(gpt_blend_matches_numpy_reference) {
  NEED_NUMPY();
  run_py(blend_ref_py);
  FILE *f = fopen("blends.txt", "r");
  CHECK(f != NULL);
  char name[32], path[64], err[STK_ERRMSG_MAX] = "";
  int n, size, n_blends = 0;
  unsigned long long target, want_size;
  while (fscanf(f, "%31s %d %d %llu %llu", name, &n, &size, &target, &want_size) == 5) {
    uint64_t m;
    snprintf(path, sizeof path, "w-%s", name);
    double *w = read_arr(path, 8, &m);
    snprintf(path, sizeof path, "once-%s", name);
    double *once = read_arr(path, 8, &m);
    snprintf(path, sizeof path, "twice-%s", name);
    double *twice = read_arr(path, 8, &m);
    double *mine = malloc((size_t)n * sizeof *mine);
    CHECK_OK(stk__gpt_blend_normalize(w, n, mine, err));
    CHECK_MSG(memcmp(mine, once, (size_t)n * 8) == 0, "%s: normalized weights differ", name);
    /* the plan: per-source sizes with the 0.5% surplus, the blend's size */
    uint64_t *src = malloc((size_t)n * sizeof *src), blend_size = 0;
    CHECK_OK(stk__gpt_blend_plan(w, n, target, 0.005, mine, src, &blend_size, err));
    CHECK_MSG(memcmp(mine, twice, (size_t)n * 8) == 0, "%s: twice-normalized weights differ", name);
    snprintf(path, sizeof path, "src-%s", name);
    uint64_t *want_src = read_arr(path, 8, &m);
    CHECK_MSG(memcmp(src, want_src, (size_t)n * 8) == 0, "%s: per-source sizes differ", name);
    CHECK_EQ(blend_size, want_size);
    /* the indices, from the twice-normalized weights as BlendedDataset has them */
    int16_t *di = malloc((size_t)size * 2 + 2);
    int64_t *dsi = malloc((size_t)size * 8 + 8);
    uint64_t *counts = calloc((size_t)n, sizeof *counts);
    CHECK_OK(stk__gpt_blend_build(twice, n, (uint64_t)size, di, dsi, counts, err));
    snprintf(path, sizeof path, "di-%s", name);
    int16_t *want_di = read_arr(path, 2, &m);
    CHECK_EQ(m, size);
    snprintf(path, sizeof path, "dsi-%s", name);
    int64_t *want_dsi = read_arr(path, 8, &m);
    for (int i = 0; i < size; i++)
      CHECK_MSG(di[i] == want_di[i] && dsi[i] == want_dsi[i],
                "%s: sample %d is (%d, %" PRId64 "), expected (%d, %" PRId64 ")", name, i, di[i],
                dsi[i], want_di[i], want_dsi[i]);
    uint64_t sum = 0;
    for (int s = 0; s < n; s++) sum += counts[s];
    CHECK_EQ(sum, size);
    if (!strcmp(name, "b37")) CHECK(counts[0] == 6000 && counts[1] == 14000);
    free(w), free(once), free(twice), free(mine), free(src), free(want_src), free(di), free(dsi);
    free(counts), free(want_di), free(want_dsi);
    n_blends++;
  }
  fclose(f);
  CHECK_EQ(n_blends, 7);
  /* exhaustive: 5 + 7 + 13 + 1 samples, each exactly once */
  int64_t sizes[4] = {5, 7, 13, 1};
  int16_t di[26];
  int64_t dsi[26];
  uint64_t m;
  CHECK_OK(stk__gpt_blend_build_exhaustive(sizes, 4, di, dsi, err));
  int16_t *want_di = read_arr("di-exh", 2, &m);
  CHECK_EQ(m, 26);
  int64_t *want_dsi = read_arr("dsi-exh", 8, &m);
  CHECK(memcmp(di, want_di, sizeof di) == 0 && memcmp(dsi, want_dsi, sizeof dsi) == 0);
  free(want_di), free(want_dsi);
}

TEST(gpt_blend_refuses_bad_weights) {
  char err[STK_ERRMSG_MAX];
  int16_t di[4];
  int64_t dsi[4];
  double out[3];
  CHECK_EQ(stk__gpt_blend_build((double[]){0.5, 0.0}, 2, 4, di, dsi, NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "weight 1 is 0; weights must be finite and positive");
  CHECK_EQ(stk__gpt_blend_normalize((double[]){1, NAN, 2}, 3, out, err), STK_EINVAL);
  CHECK_CONTAINS(err, "weight 1 is nan");
  CHECK_EQ(stk__gpt_blend_normalize((double[]){1, INFINITY}, 2, out, err), STK_EINVAL);
  CHECK_EQ(stk__gpt_blend_normalize((double[]){-1, 2}, 2, out, err), STK_EINVAL);
  CHECK_EQ(stk__gpt_blend_normalize((double[]){DBL_MAX, DBL_MAX}, 2, out, err), STK_ERANGE);
  CHECK_CONTAINS(err, "sum to inf");
  CHECK_EQ(stk__gpt_blend_build(out, 0, 4, di, dsi, NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "at least one source");
  CHECK_EQ(stk__gpt_blend_build(out, 40000, 4, di, dsi, NULL, err), STK_ERANGE);
  CHECK_EQ(stk__gpt_blend_build_exhaustive((int64_t[]){3, 0}, 2, di, dsi, err), STK_EINVAL);
  CHECK_CONTAINS(err, "source 1 has 0 samples");
  uint64_t src[2], size;
  CHECK_EQ(stk__gpt_blend_plan((double[]){1, 1}, 2, 10, -0.1, out, src, &size, err), STK_EINVAL);
  CHECK_CONTAINS(err, "surplus");
}

/* Resume is arithmetic: a job that saves its global window position and
 * restarts with another world size (1 -> 3 -> 2 ranks, each restart
 * rebuilding the index from the same inputs) serves every window of the
 * run exactly once, each the same window a single uninterrupted pass
 * serves at that position. */
TEST(gpt_index_resume_across_world_sizes) {
  enum { N_DOCS = 500 };
  int32_t len[N_DOCS];
  uint32_t x = 12345;
  for (int i = 0; i < N_DOCS; i++) {
    x = x * 1103515245u + 12345u;
    len[i] = (int32_t)(1 + (x >> 16) % 700);
  }
  struct stk__gpt_cfg cfg = {
      .lengths = len, .n_lengths = N_DOCS, .seq_len = 96, .num_samples = 5000, .seed = 77};
  char err[STK_ERRMSG_MAX];
  struct stk__gpt_index full;
  CHECK_OK(stk__gpt_index_build(&cfg, &full, err));
  CHECK(full.num_epochs > 1);
  uint64_t n = full.n_samples;
  uint8_t *seen = calloc(n, 1);
  static const int worlds[] = {1, 3, 2};
  uint64_t pos = 0; /* the saved state: the next global window position */
  for (int phase = 0; phase < 3; phase++) {
    struct stk__gpt_index ix;
    CHECK_OK(stk__gpt_index_build(&cfg, &ix, err)); /* a restarted job builds again */
    int w = worlds[phase];
    uint64_t stop = phase == 2 ? n : pos + (n / 3) / (uint64_t)w * (uint64_t)w;
    for (; pos < stop; pos += (uint64_t)w)
      for (int r = 0; r < w && pos + (uint64_t)r < stop; r++) {
        uint64_t k = pos + (uint64_t)r;
        struct stk__gpt_window a, b;
        CHECK_OK(stk__gpt_window(&ix, k, &a, err));
        CHECK_OK(stk__gpt_window(&full, k, &b, err));
        CHECK_MSG(!memcmp(&a, &b, sizeof a), "position %" PRIu64 " differs after restart", k);
        CHECK_MSG(!seen[a.sample], "sample %" PRIu64 " served twice", a.sample);
        seen[a.sample] = 1;
      }
    stk__gpt_index_free(&ix);
  }
  for (uint64_t s = 0; s < n; s++) CHECK_MSG(seen[s], "sample %" PRIu64 " never served", s);
  free(seen);
  stk__gpt_index_free(&full);
}
