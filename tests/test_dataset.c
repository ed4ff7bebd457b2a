/* Tests of src/dataset: the include rule between the layers, the formats'
 * declared capabilities, brace patterns, shard lists, a folder of mixed
 * formats, and opening local shards named one by one. The remote forms
 * (HTTP listings, single URLs, patterns over HTTP and S3) are in
 * test_remote.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/dataset/dataset_impl.h"
#include "stoker/gen.h"
#include "test.h"

static int sh(char **out, const char *cmd) {
  const char *root = getenv("STOKER_ROOT");
  return test_sh(out, "STK=%s; ROOT=%s; %s", test_stoker_bin(), root ? root : ".", cmd);
}

TEST(dataset_layers_include_rule) {
  char *out = NULL;
  /* The tree keeps the map ... */
  int rc = sh(&out, "$ROOT/tests/tools/check-layers $ROOT");
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_CONTAINS(out, "layers: ok");
  free(out);
  /* ... and the check sees a format reaching into the cache, the cache
   * into a format, the loader into the cache, a format's internals or the
   * dataset's own struct. */
  rc = sh(&out,
          "mkdir -p t/src/format t/src/cache t/src/loader t/cli && "
          "printf '#include \"../cache/cache_impl.h\"\\n' > t/src/format/x.c && "
          "printf '#include \"../format/format_impl.h\"\\n' > t/src/cache/y.c && "
          "printf '#include \"../cache/cache_impl.h\"\\n' > t/src/loader/z.c && "
          "printf '#include \"../format/format_impl.h\"\\n' > t/src/loader/f.c && "
          "printf '#include \"../dataset/dataset_impl.h\"\\n' > t/src/loader/g.c && "
          "printf '#include \"../src/base/base.h\"\\n' > t/cli/c.c && "
          "mkdir -p t/src/dataset && "
          "printf '#include \"../cache/cache_int.h\"\\n' > t/src/dataset/d.c && "
          "$ROOT/tests/tools/check-layers t");
  CHECK_EQ(rc, 1);
  CHECK_CONTAINS(out, "src/format/x.c:1: src/format may not include src/cache");
  CHECK_CONTAINS(out, "src/cache/y.c:1: src/cache may not include src/format");
  CHECK_CONTAINS(out, "src/loader/z.c:1: src/loader may not include src/cache");
  CHECK_CONTAINS(out, "src/loader/f.c:1: src/loader may not include src/format");
  CHECK_CONTAINS(out,
                 "src/loader/g.c:1: only src/dataset/dataset.h is the dataset layer's interface");
  CHECK_CONTAINS(out, "cli/c.c:1: cli/ uses the public headers only");
  CHECK_CONTAINS(out, "src/dataset/d.c:1: only src/cache/cache_impl.h is the cache's interface");
  free(out);
}

/* Every format says how it is recognised, and detection goes by what it
 * declares: each backend's own magic bytes or sniff hook accept what its
 * writer wrote. */
TEST(dataset_format_capabilities) {
  for (int i = 0; stk_formats[i]; i++) {
    const struct stk_format_ops *f = stk_formats[i];
    int recognised =
        (f->magic && f->magic_len) || f->sniff || f->dir_index || (f->caps & STK_FMT_TREE);
    CHECK_MSG(recognised, "format %s declares no way to be recognised", f->name);
    CHECK_MSG(f->exts != NULL, "format %s has no extension list", f->name);
  }
  const char *fmts[] = {"tfrecord", "wds", "npy", "npz"};
  for (size_t k = 0; k < 4; k++) {
    char dir[64], cmd[256], *out = NULL;
    snprintf(dir, sizeof dir, "cap-%s", fmts[k]);
    snprintf(cmd, sizeof cmd, "$STK gen %s --format %s --samples 4 --size 300 -q", dir, fmts[k]);
    CHECK_MSG(sh(&out, cmd) == 0, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "ls %s | grep -v '\\.idx$' | grep -v json | head -1", dir);
    sh(&out, cmd);
    out[strcspn(out, "\n")] = 0;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, out);
    free(out);
    size_t len;
    uint8_t *b = test_read_file(path, &len);
    const struct stk_format_ops *f = stk__format_sniff(b, len < 512 ? len : 512);
    CHECK_MSG(f && !strcmp(f->name, fmts[k]), "%s sniffed as %s", path, f ? f->name : "nothing");
    free(b);
  }
  uint8_t junk[64] = "just some text, no format at all";
  CHECK(stk__format_sniff(junk, sizeof junk) == NULL);
  /* Nothing but the table names a backend: generic code asks the ops. */
  char *out = NULL;
  sh(&out, "grep -rn '&stk__fmt_' $ROOT/src $ROOT/cli | grep -v '/src/format/format.c:' || true");
  CHECK_MSG(out[0] == 0, "generic code tests which backend it holds:\n%s", out);
  free(out);
}

static void names_check(const char *pattern, size_t n, const char *first, const char *last) {
  struct stk__names l = {0};
  char err[STK_ERRMSG_MAX];
  int rc = stk__brace_expand(pattern, 1000000, &l, err);
  CHECK_MSG(rc == 0, "%s: %s", pattern, err);
  CHECK_MSG(l.n == n, "%s: %zu names, want %zu", pattern, l.n, n);
  CHECK_STR(l.v[0], first);
  CHECK_STR(l.v[l.n - 1], last);
  stk__names_free(&l);
}

TEST(dataset_brace_patterns) {
  CHECK(stk__brace_has("shard-{000000..001023}.tar"));
  CHECK(stk__brace_has("{a,b}.tar"));
  CHECK(!stk__brace_has("plain{x}.tar"));
  CHECK(!stk__brace_has("dir/shard.tar"));
  names_check("https://h/train/shard-{000000..001023}.tar", 1024,
              "https://h/train/shard-000000.tar", "https://h/train/shard-001023.tar");
  names_check("s-{0..9}.tar", 10, "s-0.tar", "s-9.tar");
  names_check("s-{08..11}.tar", 4, "s-08.tar", "s-11.tar");
  names_check("s-{5..3}.tar", 3, "s-5.tar", "s-3.tar");
  names_check("s-{0..10..5}.tar", 3, "s-0.tar", "s-10.tar");
  /* Several braces: the last varies fastest (braceexpand's order). */
  names_check("{train,val}/s-{00..02}.tar", 6, "train/s-00.tar", "val/s-02.tar");
  struct stk__names l = {0};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk__brace_expand("{a,b}-{0..1}", 100, &l, err));
  CHECK_STR(l.v[1], "a-1");
  CHECK_STR(l.v[2], "b-0");
  stk__names_free(&l);
  /* Malformed patterns are one clear sentence, not a guess. */
  CHECK_EQ(stk__brace_expand("s-{0..9.tar", 100, &l, err), STK_EINVAL);
  CHECK_CONTAINS(err, "not closed");
  CHECK_EQ(stk__brace_expand("s-{a..z}.tar", 100, &l, err), STK_EINVAL);
  CHECK_CONTAINS(err, "whole numbers");
  CHECK_EQ(stk__brace_expand("s-{{0..1},2}.tar", 100, &l, err), STK_EINVAL);
  CHECK_CONTAINS(err, "nested");
  CHECK_EQ(stk__brace_expand("s-0..1}.tar", 100, &l, err), STK_EINVAL);
  CHECK_EQ(stk__brace_expand("s-{0..999999}-{0..999999}", 1000000, &l, err), STK_ERANGE);
  CHECK_EQ(l.n, 0);
  stk__names_free(&l);
}

TEST(dataset_shard_list_parse) {
  const char *text =
      "# shards\n\n  a.tar  \r\nsub/b.tar\n/abs/c.tar\nhttps://h/d.tar\n"
      "e-{0..1}.tar\n\t# indented comment\nf.tar  # a trailing comment\n"
      "https://h/g.tar#frag\t#tab\n";
  struct stk__names l = {0};
  char err[STK_ERRMSG_MAX];
  CHECK_OK(stk__list_parse(text, strlen(text), "base", 100, &l, err));
  CHECK_EQ(l.n, 8);
  CHECK_STR(l.v[6], "base/f.tar");
  CHECK_STR(l.v[7], "https://h/g.tar#frag");
  CHECK_STR(l.v[0], "base/a.tar");
  CHECK_STR(l.v[1], "base/sub/b.tar");
  CHECK_STR(l.v[2], "/abs/c.tar");
  CHECK_STR(l.v[3], "https://h/d.tar");
  CHECK_STR(l.v[4], "base/e-0.tar");
  CHECK_STR(l.v[5], "base/e-1.tar");
  stk__names_free(&l);
  CHECK_EQ(stk__list_parse("a.tar\0b.tar\n", 12, ".", 100, &l, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "line 1");
  stk__names_free(&l);
  /* A list (from a server, perhaps) cannot make more names than allowed. */
  CHECK_EQ(stk__list_parse("a.tar\nb-{0..99}.tar\n", 20, ".", 50, &l, err), STK_ERANGE);
  stk__names_free(&l);
}

TEST(dataset_names_common_root) {
  struct stk__names l = {0};
  char err[STK_ERRMSG_MAX], *root = NULL;
  stk__names_add(&l, "http://h:8/d/train/a.tar");
  stk__names_add(&l, "http://h:8/d/train/sub/b.tar");
  stk__names_add(&l, "http://h:8/d/val/c.tar");
  CHECK_OK(stk__names_common_root(&l, &root, err));
  CHECK_STR(root, "http://h:8/d");
  CHECK_STR(l.v[0], "train/a.tar");
  CHECK_STR(l.v[1], "train/sub/b.tar");
  CHECK_STR(l.v[2], "val/c.tar");
  free(root);
  stk__names_free(&l);
  stk__names_add(&l, "s3://bkt/x.tar");
  CHECK_OK(stk__names_common_root(&l, &root, err));
  CHECK_STR(root, "s3://bkt");
  CHECK_STR(l.v[0], "x.tar");
  free(root);
  stk__names_free(&l);
  stk__names_add(&l, "http://a/x/1.tar");
  stk__names_add(&l, "http://b/x/2.tar");
  CHECK_EQ(stk__names_common_root(&l, &root, err), STK_EINVAL);
  CHECK_CONTAINS(err, "different origins");
  stk__names_free(&l);
  /* The fuzzer's find: an empty name, or absolute and relative names
   * mixed, would be cut past its end. */
  stk__names_add(&l, "/a://0");
  stk__names_add(&l, "");
  CHECK_EQ(stk__names_common_root(&l, &root, err), STK_EINVAL);
  CHECK_CONTAINS(err, "empty shard name");
  stk__names_free(&l);
  stk__names_add(&l, "/d/1.tar");
  stk__names_add(&l, "d/2.tar");
  CHECK_EQ(stk__names_common_root(&l, &root, err), STK_EINVAL);
  CHECK_CONTAINS(err, "absolute and relative");
  stk__names_free(&l);
  /* One presigned URL: the query goes with the origin, for its one object;
   * several cannot share one. */
  stk__names_add(&l, "https://h/x/1.tar?X-Amz-Signature=abc");
  CHECK_OK(stk__names_common_root(&l, &root, err));
  CHECK_STR(root, "https://h/x?X-Amz-Signature=abc");
  CHECK_STR(l.v[0], "1.tar");
  free(root);
  stk__names_free(&l);
  stk__names_add(&l, "http://a/x/1.tar?X-Amz-Signature=abc");
  stk__names_add(&l, "http://a/x/2.tar?X-Amz-Signature=def");
  CHECK_EQ(stk__names_common_root(&l, &root, err), STK_EINVAL);
  CHECK(!strstr(err, "abc"));
  stk__names_free(&l);
}

/* A folder of TFRecord, tar and npy files together is an error naming
 * what was found (never one format read and the rest skipped); choosing a
 * format reads that one. */
TEST(dataset_mixed_formats_refused) {
  char *out = NULL;
  int rc = sh(&out,
              "$STK gen a --format tfrecord --samples 6 --size 100 -q && "
              "$STK gen b --format wds --samples 4 --size 100 -q && "
              "$STK gen c --format npy --samples 2 --size 100 -q && "
              "mkdir m && mv a/*.tfrecord m/ && for f in b/*.tar; do mv $f m/w-${f#b/}; "
              "done && for f in c/*.npy; do mv $f m/n-${f#c/}; done");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  char err[STK_ERRMSG_MAX];
  struct stk_dataset *ds = NULL;
  CHECK_EQ(stk_dataset_open(&ds, "m", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "m: shards of several formats: ");
  CHECK_CONTAINS(err, "tfrecord (.tfrecord");
  CHECK_CONTAINS(err, "wds (.tar)");
  CHECK_CONTAINS(err, "2 npy (.npy)");
  CHECK_CONTAINS(err, "choose one with --format");
  struct stk_dataset_opts o = {.format = "wds"};
  CHECK_OK(stk_dataset_open(&ds, "m", &o, err));
  CHECK_EQ(stk_dataset_num_samples(ds), 4);
  stk_dataset_close(ds);
  /* The CLI: verify and inspect fail with the sentence and exit non-zero. */
  rc = sh(&out, "$STK verify m");
  CHECK(rc != 0);
  CHECK_CONTAINS(out, "shards of several formats");
  free(out);
  rc = sh(&out, "$STK inspect m --format npy");
  CHECK_MSG(rc == 0, "%s", out);
  /* ... and says what it left out. */
  CHECK_CONTAINS(out, "files that are not npy shards left out (");
  free(out);
  /* A shard list mixing formats: the message names the list, not the
   * folder or the first shard. */
  CHECK_EQ(sh(&out, "ls m/* | grep -v '\\.idx$' > mixed.txt"), 0);
  free(out);
  CHECK_EQ(stk_dataset_open(&ds, "mixed.txt", NULL, err), STK_EFORMAT);
  CHECK_CONTAINS(err, "mixed.txt: shards of several formats: ");
}

/* Local shards named by a brace pattern or a shard-list file. */
TEST(dataset_local_pattern_and_list) {
  char *out = NULL;
  int rc = sh(&out,
              "$STK gen d --format tfrecord --samples 40 --size 100 --samples-per-shard 10 "
              "-q && ls d");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  char err[STK_ERRMSG_MAX];
  struct stk_dataset *ds = NULL;
  CHECK_OK(stk_dataset_open(&ds, "d/shard-{00001..00002}.tfrecord", NULL, err));
  CHECK_EQ(stk_dataset_num_shards(ds), 2);
  CHECK_EQ(stk_dataset_num_samples(ds), 20);
  CHECK_STR(stk_dataset_format(ds), "tfrecord");
  stk_dataset_close(ds);
  /* A pattern naming a shard that is not there names it. */
  CHECK(stk_dataset_open(&ds, "d/shard-{00003..00004}.tfrecord", NULL, err) != 0);
  CHECK_CONTAINS(err, "d/shard-00004.tfrecord");
  /* A list, relative entries resolved against the list's folder. */
  const char *list = "# two of them\nshard-00000.tfrecord\n\nshard-00003.tfrecord\n";
  test_write_file("d/shards.txt", list, strlen(list));
  CHECK_OK(stk_dataset_open(&ds, "d/shards.txt", NULL, err));
  CHECK_EQ(stk_dataset_num_shards(ds), 2);
  CHECK_EQ(stk_dataset_num_samples(ds), 20);
  struct stk_shard_info si;
  CHECK_OK(stk_dataset_shard_info(ds, 1, &si));
  CHECK_STR(si.path, "d/shard-00003.tfrecord");
  stk_dataset_close(ds);
  test_write_file("empty.txt", "# nothing\n", 10);
  CHECK_EQ(stk_dataset_open(&ds, "empty.txt", NULL, err), STK_EEMPTY);
  CHECK_CONTAINS(err, "empty shard list");
  /* The CLI takes them wherever a path works. */
  rc = sh(&out, "$STK verify 'd/shard-{00000..00003}.tfrecord' && $STK feed d/shards.txt -q");
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  /* bench reads a pattern as it is: it never generates data into a folder
   * named after it (a pattern naming missing shards fails instead). */
  rc = sh(&out,
          "$STK bench --data 'd/shard-{00005..00006}.tfrecord' --accelerators 1 -q; "
          "echo rc=$?; ls d | grep -c '{' || true");
  CHECK_CONTAINS(out, "shard-00005.tfrecord");
  CHECK_CONTAINS(out, "rc=1\n0\n");
  free(out);
}

/* A file:// URL is read as the path it names with its %XX escapes decoded:
 * pathlib's as_uri() writes a space as %20 (issue 18, section 6). The
 * folder, one shard, a pattern of them and a list of such URLs, with and
 * without a cache directory. */
TEST(dataset_file_url_percent_escapes) {
  char *out = NULL;
  int rc = sh(&out,
              "mkdir 'a b' && $STK gen 'a b/d' --format tfrecord --samples 30 --size 100 "
              "--samples-per-shard 10 -q && printf 'file://%s/a%%20b/d/shard-00001.tfrecord\\n' "
              "\"$PWD\" > l.txt && pwd");
  CHECK_MSG(rc == 0, "%s", out);
  out[strcspn(out, "\n")] = 0;
  char url[1024], err[STK_ERRMSG_MAX];
  struct stk_dataset *ds = NULL;
  const char *tails[] = {"/d", "/d/shard-00000.tfrecord", "/d/shard-{00000..00001}.tfrecord"};
  const uint64_t want[] = {30, 10, 20};
  struct stk_cache_opts co = {.dir = "cache"};
  struct stk_dataset_opts cached = {.cache = &co};
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 3; k++) {
      snprintf(url, sizeof url, "file://%s/a%%20b%s", out, tails[k]);
      rc = stk_dataset_open(&ds, url, c ? &cached : NULL, err);
      CHECK_MSG(rc == 0, "%s: %s", url, err);
      CHECK_EQ(stk_dataset_num_samples(ds), want[k]);
      stk_dataset_close(ds);
    }
  CHECK_OK(stk_dataset_open(&ds, "l.txt", NULL, err));
  CHECK_EQ(stk_dataset_num_samples(ds), 10);
  struct stk_shard_info si;
  CHECK_OK(stk_dataset_shard_info(ds, 0, &si));
  CHECK_CONTAINS(si.path, "/a b/d/shard-00001.tfrecord");
  stk_dataset_close(ds);
  /* A file URL naming another host is refused, saying what it needs. */
  CHECK_EQ(stk_dataset_open(&ds, "file://host/x", NULL, err), STK_EINVAL);
  CHECK_CONTAINS(err, "a file URL needs an absolute path");
  free(out);
}
