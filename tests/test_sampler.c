/* Sampler tests: permutations are permutations, ranks partition an epoch,
 * and a saved state resumes the exact remaining order, also with another
 * world size. Uses a dataset description without files. */
#include <stdlib.h>

#include "../src/dataset/dataset_impl.h"
#include "../src/loader/loader_impl.h"
#include "stoker/loader.h"
#include "test.h"

/* A fake dataset of nshards shards of `per` samples each (last one short). */
static struct stk_dataset *fake_ds(size_t nshards, uint64_t per, uint64_t last, unsigned caps) {
  static struct stk_format_ops ops;
  ops.name = "fake";
  ops.caps = caps;
  struct stk_dataset *ds = calloc(1, sizeof *ds);
  ds->fmt = &ops;
  ds->nshards = nshards;
  ds->shards = calloc(nshards, sizeof *ds->shards);
  ds->rows = calloc(nshards, sizeof *ds->rows);
  uint64_t first = 0;
  for (size_t i = 0; i < nshards; i++) {
    ds->rows[i].first = first;
    ds->shards[i].count = i + 1 == nshards ? last : per;
    first += ds->shards[i].count;
  }
  ds->nsamples = first;
  return ds;
}

static void free_ds(struct stk_dataset *ds) {
  free(ds->shards);
  free(ds->rows);
  free(ds);
}

/* Draw the rest of the epoch; returns the count. */
static uint64_t drain(struct stk_sampler *s, uint64_t *out) {
  uint64_t n = 0, id;
  while (stk_sampler_next(s, &id) == 0) out[n++] = id;
  return n;
}

static void check_permutation(const uint64_t *v, uint64_t n, uint64_t total) {
  CHECK_EQ(n, total);
  uint8_t *seen = calloc(total, 1);
  for (uint64_t i = 0; i < n; i++) {
    CHECK_MSG(v[i] < total, "sample %llu out of range", (unsigned long long)v[i]);
    CHECK_MSG(!seen[v[i]], "sample %llu twice", (unsigned long long)v[i]);
    seen[v[i]] = 1;
  }
  free(seen);
}

static void check_mode_is_permutation(enum stk_shuffle mode) {
  uint64_t sizes[] = {1, 2, 3, 17, 1000, 4097};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    uint64_t n = sizes[k];
    struct stk_dataset *ds = fake_ds(n > 5 ? 5 : 1, n > 5 ? n / 5 : n, n > 5 ? n - 4 * (n / 5) : n,
                                     STK_FMT_RANDOM_ACCESS);
    struct stk_sampler *s;
    struct stk_sampler_opts o = {.shuffle = mode, .seed = 9, .shuffle_window = 64};
    CHECK_OK(stk_sampler_open(&s, ds, &o));
    uint64_t *v = malloc(n * sizeof *v);
    for (uint64_t e = 0; e < 3; e++) {
      stk_sampler_set_epoch(s, e);
      check_permutation(v, drain(s, v), n);
    }
    free(v);
    stk_sampler_close(s);
    free_ds(ds);
  }
}

TEST(sampler_global_is_permutation) { check_mode_is_permutation(STK_SHUFFLE_GLOBAL); }
TEST(sampler_block_is_permutation) { check_mode_is_permutation(STK_SHUFFLE_BLOCK); }
TEST(sampler_none_is_identity) {
  struct stk_dataset *ds = fake_ds(3, 10, 5, 0);
  struct stk_sampler *s;
  struct stk_sampler_opts o = {.shuffle = STK_SHUFFLE_NONE};
  CHECK_OK(stk_sampler_open(&s, ds, &o));
  uint64_t v[25];
  CHECK_EQ(drain(s, v), 25);
  for (int i = 0; i < 25; i++) CHECK_EQ(v[i], i);
  stk_sampler_close(s);
  free_ds(ds);
}

TEST(sampler_seed_and_epoch_change_order) {
  struct stk_dataset *ds = fake_ds(4, 250, 250, STK_FMT_RANDOM_ACCESS);
  struct stk_sampler *a, *b;
  struct stk_sampler_opts oa = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 1};
  struct stk_sampler_opts ob = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 2};
  CHECK_OK(stk_sampler_open(&a, ds, &oa));
  CHECK_OK(stk_sampler_open(&b, ds, &ob));
  uint64_t va[1000], vb[1000], va2[1000];
  drain(a, va);
  drain(b, vb);
  stk_sampler_set_epoch(a, 1);
  drain(a, va2);
  int same_seed = 0, same_epoch = 0, identity = 0;
  for (int i = 0; i < 1000; i++) {
    same_seed += va[i] == vb[i];
    same_epoch += va[i] == va2[i];
    identity += va[i] == (uint64_t)i;
  }
  /* A random permutation has about one fixed point in common with another. */
  CHECK_MSG(same_seed < 20 && same_epoch < 20 && identity < 20, "%d %d %d", same_seed, same_epoch,
            identity);
  /* Same seed and epoch: the same order, run after run. */
  stk_sampler_set_epoch(a, 0);
  uint64_t again[1000];
  drain(a, again);
  CHECK(memcmp(again, va, sizeof va) == 0);
  stk_sampler_close(a);
  stk_sampler_close(b);
  free_ds(ds);
}

TEST(sampler_block_reads_few_shards_at_a_time) {
  /* 20 shards of 100; window 50: any 50 consecutive draws touch <= 2 shards. */
  struct stk_dataset *ds = fake_ds(20, 100, 100, 0);
  struct stk_sampler *s;
  struct stk_sampler_opts o = {.shuffle = STK_SHUFFLE_BLOCK, .seed = 3, .shuffle_window = 50};
  CHECK_OK(stk_sampler_open(&s, ds, &o));
  uint64_t v[2000];
  CHECK_EQ(drain(s, v), 2000);
  for (int w = 0; w < 2000; w += 50) {
    uint64_t shard0 = v[w] / 100;
    int other = -1;
    for (int i = w; i < w + 50; i++) {
      uint64_t sh = v[i] / 100;
      if (sh != shard0) {
        CHECK_MSG(other < 0 || (uint64_t)other == sh, "window at %d spans 3 shards", w);
        other = (int)sh;
      }
    }
  }
  /* and it is shuffled: not in stream order */
  int inorder = 0;
  for (int i = 1; i < 2000; i++) inorder += v[i] == v[i - 1] + 1;
  CHECK_MSG(inorder < 200, "%d consecutive pairs", inorder);
  stk_sampler_close(s);
  free_ds(ds);
}

/* Ranks of one world together read the epoch exactly once. */
TEST(sampler_ranks_partition_epoch) {
  struct stk_dataset *ds = fake_ds(7, 143, 100, STK_FMT_RANDOM_ACCESS);
  uint64_t n = ds->nsamples;
  for (uint32_t world = 1; world <= 5; world++) {
    uint64_t *all = malloc(n * sizeof *all), got = 0;
    for (uint32_t r = 0; r < world; r++) {
      struct stk_sampler *s;
      struct stk_sampler_opts o = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 5, .rank = r, .world = world};
      CHECK_OK(stk_sampler_open(&s, ds, &o));
      uint64_t len = stk_sampler_epoch_len(s), k = drain(s, all + got);
      CHECK_EQ(k, len);
      got += k;
      stk_sampler_close(s);
    }
    check_permutation(all, got, n);
    free(all);
  }
  free_ds(ds);
}

/* Save after some rounds with world W, restore with world W': the union of
 * what was read before and after is the epoch exactly once, and the order
 * after restoring is the same global order. */
static void resume_case(enum stk_shuffle mode, uint32_t w1, uint32_t w2, uint64_t rounds) {
  struct stk_dataset *ds = fake_ds(6, 150, 77, STK_FMT_RANDOM_ACCESS);
  uint64_t n = ds->nsamples;
  uint64_t *all = malloc(2 * n * sizeof *all), got = 0;
  struct stk_sampler_state st = {0};
  for (uint32_t r = 0; r < w1; r++) {
    struct stk_sampler *s;
    struct stk_sampler_opts o = {.shuffle = mode, .seed = 11, .shuffle_window = 32, .rank = r, .world = w1};
    CHECK_OK(stk_sampler_open(&s, ds, &o));
    stk_sampler_set_epoch(s, 2);
    for (uint64_t k = 0; k < rounds; k++) CHECK_OK(stk_sampler_next(s, &all[got++]));
    stk_sampler_save(s, &st); /* every rank saves the same state */
    CHECK_EQ(st.position, rounds * w1);
    stk_sampler_close(s);
  }
  for (uint32_t r = 0; r < w2; r++) {
    struct stk_sampler *s;
    struct stk_sampler_opts o = {.shuffle = mode, .seed = 11, .shuffle_window = 32, .rank = r, .world = w2};
    CHECK_OK(stk_sampler_open(&s, ds, &o));
    CHECK_OK(stk_sampler_restore(s, &st));
    got += drain(s, all + got);
    stk_sampler_close(s);
  }
  check_permutation(all, got, n);
  free(all);
  free_ds(ds);
}

TEST(sampler_resume_other_world_size) {
  resume_case(STK_SHUFFLE_GLOBAL, 4, 3, 50);
  resume_case(STK_SHUFFLE_GLOBAL, 2, 5, 101);
  resume_case(STK_SHUFFLE_BLOCK, 3, 1, 77);
  resume_case(STK_SHUFFLE_BLOCK, 1, 4, 333);
  resume_case(STK_SHUFFLE_NONE, 2, 2, 10);
}

TEST(sampler_resume_same_order) {
  struct stk_dataset *ds = fake_ds(3, 300, 300, STK_FMT_RANDOM_ACCESS);
  struct stk_sampler *a, *b;
  struct stk_sampler_opts o = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 77};
  CHECK_OK(stk_sampler_open(&a, ds, &o));
  CHECK_OK(stk_sampler_open(&b, ds, &o));
  stk_sampler_set_epoch(a, 4);
  uint64_t id;
  for (int i = 0; i < 123; i++) CHECK_OK(stk_sampler_next(a, &id));
  struct stk_sampler_state st;
  stk_sampler_save(a, &st);
  CHECK_OK(stk_sampler_restore(b, &st));
  uint64_t x, y;
  while (stk_sampler_next(a, &x) == 0) {
    CHECK_OK(stk_sampler_next(b, &y));
    CHECK_EQ(x, y);
  }
  CHECK_EQ(stk_sampler_next(b, &y), STK_EOF);
  /* a state from another seed is refused */
  st.seed = 78;
  CHECK_EQ(stk_sampler_restore(b, &st), STK_EINVAL);
  stk_sampler_close(a);
  stk_sampler_close(b);
  free_ds(ds);
}

/* A state that records the dataset's fingerprint resumes only on that
 * dataset: the same total in other shards, or other shard names, is
 * refused; a state without one (older files) still resumes. */
TEST(sampler_resume_refuses_other_dataset) {
  struct stk_dataset *a = fake_ds(3, 100, 100, STK_FMT_RANDOM_ACCESS);
  struct stk_dataset *b = fake_ds(4, 75, 75, STK_FMT_RANDOM_ACCESS); /* also 300 samples */
  struct stk_dataset *c = fake_ds(3, 100, 100, STK_FMT_RANDOM_ACCESS);
  char n0[] = "x/shard-0", n1[] = "x/shard-1", n2[] = "x/shard-2", m2[] = "x/other-2";
  a->shards[0].path = c->shards[0].path = n0;
  a->shards[1].path = c->shards[1].path = n1;
  a->shards[2].path = n2;
  c->shards[2].path = m2;
  uint64_t fa = stk_sampler_fingerprint(a);
  CHECK(fa != 0);
  CHECK_EQ(fa, stk_sampler_fingerprint(a));
  CHECK(fa != stk_sampler_fingerprint(b));
  CHECK(fa != stk_sampler_fingerprint(c));
  struct stk_sampler_opts o = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 5};
  struct stk_sampler *sa, *sb, *sc;
  CHECK_OK(stk_sampler_open(&sa, a, &o));
  CHECK_OK(stk_sampler_open(&sb, b, &o));
  CHECK_OK(stk_sampler_open(&sc, c, &o));
  uint64_t id;
  for (int i = 0; i < 10; i++) CHECK_OK(stk_sampler_next(sa, &id));
  struct stk_sampler_state st;
  stk_sampler_save(sa, &st);
  CHECK_EQ(st.dataset_fp, 0); /* save is per batch: the caller records it */
  CHECK_OK(stk_sampler_restore(sb, &st)); /* no fingerprint: not checked */
  st.dataset_fp = fa;
  CHECK_EQ(stk_sampler_restore(sb, &st), STK_EINVAL);
  CHECK_EQ(stk_sampler_restore(sc, &st), STK_EINVAL);
  CHECK_OK(stk_sampler_restore(sa, &st));
  stk_sampler_close(sa);
  stk_sampler_close(sb);
  stk_sampler_close(sc);
  free_ds(a);
  free_ds(b);
  free_ds(c);
}

/* PAD and DROP: every rank the same share of an epoch world does not
 * divide; PAD's last round wraps to the epoch's first samples (every
 * sample at least once, fewer than world twice), DROP leaves fewer than
 * world out (none twice); epoch_len says each share; a PAD state saved at
 * world 3 resumes at world 2 with the samples that were left. */
TEST(sampler_even_shares_pad_and_drop) {
  struct stk_dataset *ds = fake_ds(3, 4, 3, STK_FMT_RANDOM_ACCESS); /* 11 samples */
  for (int shares = STK_SHARES_PAD; shares <= STK_SHARES_DROP; shares++) {
    for (uint32_t world = 1; world <= 5; world++) {
      uint64_t want = shares == STK_SHARES_PAD ? (11 + world - 1) / world : 11 / world;
      int hits[11] = {0};
      uint64_t total = 0;
      for (uint32_t r = 0; r < world; r++) {
        struct stk_sampler *s;
        struct stk_sampler_opts o = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 5, .rank = r,
                                     .world = world};
        CHECK_OK(stk_sampler_open(&s, ds, &o));
        stk__sampler_set_shares(s, shares);
        stk_sampler_set_epoch(s, 1);
        CHECK_EQ(stk_sampler_epoch_len(s), want);
        uint64_t v[16];
        uint64_t n = drain(s, v);
        CHECK_MSG(n == want, "shares %d world %u rank %u: %llu samples, want %llu", shares,
                  world, r, (unsigned long long)n, (unsigned long long)want);
        for (uint64_t i = 0; i < n; i++) hits[v[i]]++;
        total += n;
        stk_sampler_close(s);
      }
      for (int i = 0; i < 11; i++) {
        if (shares == STK_SHARES_PAD) CHECK_MSG(hits[i] >= 1 && hits[i] <= 2, "sample %d", i);
        else CHECK_MSG(hits[i] <= 1, "sample %d twice", i);
      }
      if (shares == STK_SHARES_PAD) CHECK(total - 11 < world);
      else CHECK(11 - total < world);
    }
  }
  /* PAD at world 3 runs to position 12; saved at 9, resumed at world 2. */
  struct stk_sampler *s;
  struct stk_sampler_opts o = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 5, .world = 3};
  CHECK_OK(stk_sampler_open(&s, ds, &o));
  stk__sampler_set_shares(s, STK_SHARES_PAD);
  uint64_t id;
  for (int i = 0; i < 3; i++) CHECK_OK(stk_sampler_next(s, &id));
  struct stk_sampler_state st;
  stk_sampler_save(s, &st);
  CHECK_EQ(st.position, 9);
  stk_sampler_close(s);
  uint64_t rest = 0;
  for (uint32_t r = 0; r < 2; r++) {
    struct stk_sampler_opts o2 = {.shuffle = STK_SHUFFLE_GLOBAL, .seed = 5, .rank = r, .world = 2};
    CHECK_OK(stk_sampler_open(&s, ds, &o2));
    stk__sampler_set_shares(s, STK_SHARES_PAD);
    CHECK_OK(stk_sampler_restore(s, &st));
    uint64_t v[16];
    rest += drain(s, v);
    stk_sampler_close(s);
  }
  CHECK_EQ(rest, 3); /* positions 9, 10 and 11: world 2 pads 11 samples to 12, 11 wrapping to 0 */
  free_ds(ds);
}
