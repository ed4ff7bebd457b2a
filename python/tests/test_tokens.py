"""GPT token windows from Python: stoker.Loader(seq_len=...) batches are
the windows the C library serves ([batch, seq_len + 1], int64 or int32,
zero copy), and stoker.torch yields Megatron's training dict; equal steps
and exact resume across world sizes; blends; packing boundaries."""
import os
import subprocess

import numpy as np
import pytest

import stoker
from conftest import STOKER_BIN, needs_torch


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two Megatron corpora written by stoker gen (uint16 tokens)."""
    base = tmp_path_factory.mktemp("tok")
    out = []
    for name, docs, seed in (("a", 300, 1), ("b", 200, 2)):
        d = str(base / name)
        r = subprocess.run([STOKER_BIN, "gen", d, "--format", "megatron", "--samples", str(docs),
                            "--doc-len", "60", "--doc-len-stdev", "30", "--vocab", "1000",
                            "--seed", str(seed), "-q"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out.append(d)
    return out


def stream(path):
    """Every token of a one-pair Megatron corpus, and the documents' lengths,
    read straight from the .idx/.bin with NumPy (the layout of docs/formats.md)."""
    (idx,) = [f for f in os.listdir(path) if f.endswith(".idx")]
    raw = open(os.path.join(path, idx), "rb").read()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    code = raw[17]
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[code]
    nseq = int(np.frombuffer(raw, np.uint64, 1, 18)[0])
    lengths = np.frombuffer(raw, np.int32, nseq, 34)
    tokens = np.fromfile(os.path.join(path, idx[:-4] + ".bin"), dtype=dtype)
    return tokens.astype(np.int64), lengths


def test_windows_are_the_c_librarys(corpus, tmp_path):
    # Each row is seq_len + 1 consecutive tokens of the corpus (windows cross
    # documents); int32 and int64 batches hold the same values; one pass
    # serves every window of the order once.
    toks, _ = stream(corpus[0])
    text = toks.tobytes()
    rows = {}
    for ttype in ("int64", "int32"):
        with stoker.Loader(corpus[0], 8, seq_len=32, tokens=ttype, index_dir=str(tmp_path)) as ld:
            info = ld.dataset_info()
            assert info["row_len"] == 33 and info["format"] == "megatron"
            got = {}
            for b in ld:
                a = np.asarray(b.data)
                assert a.dtype == np.dtype(ttype) and a.shape[1] == 33
                assert np.asarray(b.loss_mask).all()  # no padding in megatron windows
                for w, row in zip(np.asarray(b.windows).tolist(), a.astype(np.int64)):
                    got[w] = row
        assert sorted(got) == list(range(info["windows"]))
        rows[ttype] = got
    eod = 999  # stoker gen ends every document with vocab - 1
    for w, row in rows["int64"].items():
        assert (row == rows["int32"][w]).all()
        # Windows cross the shuffled documents: every piece between two
        # end-of-document tokens is a run of the corpus as stored.
        cuts = [0] + [i + 1 for i in np.flatnonzero(row == eod).tolist()] + [len(row)]
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                at = text.find(row[a:b].tobytes())
                assert at >= 0 and at % 8 == 0, (w, a, b)


@needs_torch
@pytest.mark.parametrize("world", [1, 2, 3])
def test_torch_dict_equal_steps_and_resume(corpus, tmp_path, world):
    # stoker.torch: Megatron's dict (tokens, labels shifted by one, loss
    # mask on the labels); the same len() on every rank; a state saved after
    # two steps at this world size resumes at world size 2 with exactly the
    # windows left (with shares="uneven", each once).
    import stoker.torch as st
    kw = dict(seq_len=16, index_dir=str(tmp_path), shares="uneven", return_indices=True)
    full = []
    for r in range(world):
        ds = st.StokerDataset(corpus[0], 4, rank=r, world_size=world, **kw)
        for item in ds:
            assert (item["tokens"][:, 1:] == item["labels"][:, :-1]).all()
            assert item["tokens"].shape[1] == 16 and item["loss_mask"].shape == item["labels"].shape
            full += item["windows"].tolist()
    assert len(full) == len(set(full))
    head, state = [], None
    for r in range(world):
        ds = st.StokerDataset(corpus[0], 4, rank=r, world_size=world, **kw)
        it = iter(ds)
        for _ in range(2):
            head += next(it)["windows"].tolist()
        state = ds.state_dict()
        del it
    tail = []
    for r in range(2):
        ds = st.StokerDataset(corpus[0], 4, rank=r, world_size=2, **kw)
        ds.load_state_dict(state)
        tail += [w for item in ds for w in item["windows"].tolist()]
    assert sorted(head + tail) == sorted(full)
    counts = {len(st.StokerDataset(corpus[0], 4, rank=r, world_size=world, seq_len=16,
                                   index_dir=str(tmp_path))) for r in range(world)}
    assert len(counts) == 1


@needs_torch
def test_torch_packing_boundaries(corpus, tmp_path):
    # windows="pack": cu_seqlens over the flattened inputs and positions
    # restarting at each document.
    import stoker.torch as st
    ds = st.StokerDataset(corpus[0], 4, seq_len=64, windows="pack", index_dir=str(tmp_path),
                          rank=0, world_size=1)
    item = next(iter(ds))
    cu, pos = item["cu_seqlens"].tolist(), item["position_ids"]
    rows, s = item["tokens"].shape
    assert cu[0] == 0 and cu[-1] == rows * s and cu == sorted(set(cu))
    assert all(i * s in cu for i in range(rows + 1))
    flat = pos.reshape(-1).tolist()
    for a, b in zip(cu, cu[1:]):
        assert flat[a:b] == list(range(b - a))


def test_blend_counts_and_bad_options(corpus, tmp_path):
    # A blend of two corpora by weight: per-source windows taken add up to
    # the order; bad token options are refused naming the option.
    with stoker.Loader(None, 10, seq_len=16, samples=400, blend=[(0.3, corpus[0]), (0.7, corpus[1])],
                       index_dir=str(tmp_path)) as ld:
        info = ld.dataset_info()
        srcs = info["sources"]
        assert [s["path"] for s in srcs] == corpus
        assert sum(s["blend_windows"] for s in srcs) == info["windows"]
        assert srcs[1]["blend_windows"] > srcs[0]["blend_windows"]
        assert sum(len(b) for b in ld) == info["windows"]
    with stoker.Loader(corpus[0], 4, seq_len=16, blend=f"0.5 {corpus[0]} 0.5 {corpus[1]}",
                       samples=50, index_dir=str(tmp_path)) as ld:
        assert len(ld.dataset_info()["sources"]) == 2
    for kw, exc, word in ((dict(blend=[(0, corpus[0])], seq_len=8), ValueError, "blend"),
                          (dict(blend="1 a 2"), ValueError, "blend"),
                          (dict(samples=5), ValueError, "seq_len"),
                          (dict(seq_len=8, windows="sliding"), ValueError, "windows"),
                          (dict(seq_len=8, tokens="int16"), ValueError, "tokens")):
        with pytest.raises(exc, match=word):
            stoker.Loader(corpus[0], 4, **kw)
    with pytest.raises(stoker.Error, match="split"):
        stoker.Loader(corpus[0], 4, seq_len=8, split="9,x", index_dir=str(tmp_path))


@pytest.fixture
def nginx(tmp_path):
    """A loopback nginx (tests/tools/serve) serving a directory: start(dir)
    gives its URL; every server started is stopped after the test."""
    from conftest import ROOT
    serve = os.path.join(ROOT, "tests", "tools", "serve")
    run_dir = str(tmp_path)

    def start(d):
        r = subprocess.run([serve, "nginx", d], capture_output=True, text=True, cwd=run_dir)
        if r.returncode != 0:
            pytest.skip("cannot start a loopback nginx here: " + r.stderr.strip()[-300:])
        return r.stdout.splitlines()[0]
    yield start
    subprocess.run([serve, "stop"], capture_output=True, cwd=run_dir)


def test_remote_corpus_through_chunks(corpus, tmp_path, nginx):
    # A Megatron corpus over HTTP is read through the cache in chunks of
    # cache_chunk_size (the CLI's --cache-chunk-size): every window equals
    # the local corpus's, the .bin arrives in many 4 KiB chunks kept as
    # disk-tier entries, and a size outside 4KiB..4GiB is refused.
    url = nginx(os.path.dirname(corpus[0]))
    name = os.path.basename(corpus[0])
    (idx,) = [f for f in os.listdir(corpus[0]) if f.endswith(".idx")]
    remote = f"{url}/{name}/{idx[:-4]}"
    bin_bytes = os.path.getsize(os.path.join(corpus[0], idx[:-4] + ".bin"))

    def windows(src, **kw):
        got = {}
        with stoker.Loader(src, 8, seq_len=32, index_dir=str(tmp_path / "ix"), **kw) as ld:
            for b in ld:
                for w, row in zip(np.asarray(b.windows).tolist(), np.asarray(b.data)):
                    got[w] = row.tolist()
            return got, ld.stats()

    local, _ = windows(corpus[0])
    cache = tmp_path / "cache"
    got, st = windows(remote, cache_dir=str(cache), cache_chunk_size="4KiB")
    assert got == local
    assert st["cache"]["fetches"] >= bin_bytes // 4096
    chunks = [f for f in os.listdir(cache / "data") if ".c1-" in f and not f.endswith(".meta")]
    assert len(chunks) == 1
    for bad in (100, "1KiB", "8GiB"):
        with pytest.raises(ValueError, match="cache_chunk_size"):
            stoker.Loader(remote, 8, seq_len=32, cache_dir=str(cache), cache_chunk_size=bad)


def test_keeping_more_batches_than_the_ring_holds(corpus, tmp_path):
    # A token loader's ring starts at 4 batches (6 places); a consumer that
    # keeps 9 batches alive at a time (gradient accumulation over views)
    # gets every batch, the ring growing for them, and BusyError only past
    # what prefetch_max lets the ring grow to.
    with stoker.Loader(corpus[0], 2, seq_len=16, index_dir=str(tmp_path)) as ld:
        held, n = [], 0
        for b in ld:
            held.append(b)
            n += 1
            if len(held) > 9:
                held.pop(0)
        assert n > 20
        assert ld.stats()["ring_depth_max"] >= 8
    with stoker.Loader(corpus[0], 2, seq_len=16, prefetch_max=3, index_dir=str(tmp_path)) as ld:
        held = []
        with pytest.raises(stoker.BusyError, match="held by a live batch"):
            for b in ld:
                held.append(b)
        assert len(held) == 5  # prefetch_max 3 + the 2 always outstanding
