#!/usr/bin/env python3
"""T1 of issue 18: Megatron-LM's GPT index build against stoker's, and
whether the arrays are identical.

Writes a synthetic corpus (document lengths drawn from a log-normal
distribution; a Megatron .idx and a sparse .bin, since no index build reads
tokens), then builds GPTDataset indices for one and two epochs and a 0.3/0.7
BlendedDataset with megatron-core's own classes, and the same with stoker's C
(build/bench/gpt_index), and compares every array, dtype included.

megatron-core is the anchor: it is installed in a separate environment
(never part of stoker) and this script must run under that environment's
Python. bench/megatron_index.sh does that with the anchors' environment
(.venv-anchors, bench/anchors-setup: megatron-core 0.16.1 and the torch its
dataset module imports); by hand:
    make build/bench/gpt_index && .venv-anchors/bin/python bench/megatron_index.py
Megatron's times are given two ways: its GPTDataset constructor (which also
writes its .npy cache files) and its index functions called alone in the
constructor's order (document index, helpers.build_sample_idx, shuffle
index), which is what stoker's build time covers.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy


def write_corpus(prefix, n_docs, tokens, seed):
    """Lengths summing to exactly `tokens`, an .idx as Megatron's builder
    writes it (uint16 tokens, one sequence per document) and a sparse .bin."""
    g = numpy.random.RandomState(seed)
    raw = g.lognormal(mean=0.0, sigma=1.0, size=n_docs)
    lengths = numpy.maximum(1, numpy.floor(raw / raw.sum() * tokens)).astype(numpy.int64)
    lengths[: int(tokens - lengths.sum()) % n_docs] += 1  # spread the rounding
    lengths[0] += tokens - lengths.sum()
    lengths = lengths.astype(numpy.int32)
    assert int(lengths.astype(numpy.int64).sum()) == tokens and lengths.min() > 0
    numpy.save(prefix + "-lengths.npy", lengths)
    pointers = numpy.zeros(n_docs, dtype=numpy.int64)
    numpy.cumsum(lengths[:-1].astype(numpy.int64) * 2, out=pointers[1:])
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(numpy.array([1], "<u8").tobytes())
        f.write(numpy.array([8], "<u1").tobytes())  # DType code 8: uint16
        f.write(numpy.array([n_docs, n_docs + 1], "<u8").tobytes())
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(numpy.arange(n_docs + 1, dtype="<i8").tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(tokens * 2)
    return lengths


class Tokenizer:
    vocab_size = 50304
    eod = 0
    pad = 50303
    unique_identifiers = {"class": "Tokenizer", "vocab_size": 50304}


def megatron_config(prefixes, seq, seed, cache):
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq,
        blend=(prefixes, None),
        split="100,0,0",
        path_to_cache=cache,
        tokenizer=Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )


def megatron_gpt(prefix, num_samples, seq, seed, cache):
    """GPTDataset as the builder makes a train split (all documents)."""
    from megatron.core.datasets.gpt_dataset import GPTDataset
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    config = megatron_config([prefix], seq, seed, cache)
    low = IndexedDataset(prefix, multimodal=False, mmap=True)
    docs = numpy.arange(0, low.sequence_lengths.shape[0], dtype=numpy.int32)
    t0 = time.perf_counter()
    ds = GPTDataset(low, prefix, docs, num_samples, Split.train, config)
    return ds, time.perf_counter() - t0, low, docs


def megatron_compute_only(ds, low, docs, num_samples, seq, seed):
    """Megatron's own index functions, in its constructor's order, without
    the cache writing: document index, build_sample_idx, shuffle index."""
    from megatron.core.datasets import gpt_dataset as g
    from megatron.core.datasets import helpers

    t0 = time.perf_counter()
    tokens = int(numpy.sum(low.sequence_lengths[docs]))
    epochs = ds._get_num_epochs(tokens)
    sep = False
    if epochs > 1:
        sans = ((epochs - 1) * tokens - 1) // seq
        per = (tokens - 1) // seq
        sep = num_samples - sans < int(0.80 * per)
    rs = numpy.random.RandomState(seed)
    di = g._build_document_index(docs, epochs, rs, sep)
    si = helpers.build_sample_idx(low.sequence_lengths.copy(), di, seq, epochs, tokens, True, True)
    n = si.shape[0] - 1
    g._build_shuffle_index(sans if sep else n, n, rs)
    return time.perf_counter() - t0


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and bool(numpy.array_equal(a, b))


def stoker(exe, args):
    out = subprocess.run([exe] + args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare_gpt(ds, prefix):
    got = {k: numpy.load(f"{prefix}-{k}.npy") for k in ("document_index", "sample_index", "shuffle_index")}
    want = {"document_index": ds.document_index, "sample_index": ds.sample_index,
            "shuffle_index": ds.shuffle_index}
    return {k: same(numpy.asarray(want[k]), got[k]) for k in want}, {k: str(got[k].dtype) for k in got}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=float, default=1e9)
    ap.add_argument("--docs", type=float, default=1e6)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--stoker", default="build/bench/gpt_index")
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args()
    if a.dir:
        os.makedirs(a.dir, exist_ok=True)
        return run(a, a.dir)
    with tempfile.TemporaryDirectory(prefix="megatron-index-") as work:
        return run(a, work)


def run(a, work):
    import megatron.core
    import torch

    # BlendedDataset asks for the rank: one process, one rank.
    torch.distributed.init_process_group("gloo", init_method=f"file://{work}/pg", rank=0, world_size=1)
    try:
        return measure(a, work, megatron.core.__version__)
    finally:
        torch.distributed.destroy_process_group()


def measure(a, work, version):
    tokens, n_docs = int(a.tokens), int(a.docs)
    pa, pb = os.path.join(work, "corpus_a"), os.path.join(work, "corpus_b")
    write_corpus(pa, n_docs, tokens, 1)
    write_corpus(pb, n_docs, tokens, 2)
    per_epoch = (tokens - 1) // a.seq
    rows = []
    for label, ns in (("1 epoch", per_epoch), ("1.5 epochs", 3 * per_epoch // 2), ("2 epochs", 2 * per_epoch)):
        cache = tempfile.mkdtemp(dir=work)
        ds, t_meg, low, docs = megatron_gpt(pa, ns, a.seq, a.seed, cache)
        t_meg_compute = megatron_compute_only(ds, low, docs, ns, a.seq, a.seed)
        out = os.path.join(work, "stk-" + label.replace(" ", ""))
        r = stoker(a.stoker, ["build", pa + "-lengths.npy", str(a.seq), str(ns), str(a.seed), out])
        eq, dtypes = compare_gpt(ds, out)
        rows.append({"case": "GPTDataset " + label, "samples": ns, "megatron_s": t_meg,
                     "megatron_compute_s": t_meg_compute, "stoker_s": r["build_s"],
                     "identical": all(eq.values()), "arrays": eq, "dtypes": dtypes})

    # The 0.3/0.7 blend, as BlendedMegatronDatasetBuilder makes it: each
    # source built for its share plus the surplus, blended over the shares.
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import _get_size_per_split_per_dataset
    from megatron.core.datasets.utils import normalize

    target = 2 * per_epoch
    weights = normalize([0.3, 0.7])
    want = [s[0] for s in _get_size_per_split_per_dataset(weights, [target])]
    build = [s[0] for s in _get_size_per_split_per_dataset(weights, [target], surplus=0.005)]
    cache = tempfile.mkdtemp(dir=work)
    t0 = time.perf_counter()
    sources = [megatron_gpt(p, n, a.seq, a.seed, cache)[0] for p, n in zip((pa, pb), build)]
    blend = BlendedDataset(sources, weights, sum(want), megatron_config([pa, pb], a.seq, a.seed, cache))
    t_meg = time.perf_counter() - t0
    out = os.path.join(work, "stk-blend")
    r = stoker(a.stoker, ["blend", str(a.seq), str(target), str(a.seed), out,
                          "0.3:" + pa + "-lengths.npy", "0.7:" + pb + "-lengths.npy"])
    eq = {"dataset_index": same(blend.dataset_index, numpy.load(out + "-dataset_index.npy")),
          "dataset_sample_index": same(blend.dataset_sample_index,
                                       numpy.load(out + "-dataset_sample_index.npy"))}
    for i, s in enumerate(sources):
        for k, v in compare_gpt(s, f"{out}-source{i}")[0].items():
            eq[f"source{i}.{k}"] = v
    rows.append({"case": "BlendedDataset 0.3/0.7", "samples": sum(want), "megatron_s": t_meg,
                 "megatron_compute_s": None, "stoker_s": r["build_s"],
                 "identical": all(eq.values()), "arrays": eq, "source_samples": build})

    print(f"megatron-core {version}, numpy {numpy.__version__}; "
          f"{tokens:.3g} tokens per corpus in {n_docs:.3g} documents, seq_len {a.seq}, seed {a.seed}")
    print(f"{'case':26} {'samples':>9} {'megatron s':>11} {'(compute)':>10} {'stoker s':>9} identical")
    for r in rows:
        mc = "-" if r["megatron_compute_s"] is None else f"{r['megatron_compute_s']:.3f}"
        print(f"{r['case']:26} {r['samples']:>9} {r['megatron_s']:>11.3f} {mc:>10} "
              f"{r['stoker_s']:>9.3f} {'yes' if r['identical'] else 'NO ' + str(r['arrays'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"megatron_core": version, "numpy": numpy.__version__,
                       "tokens": tokens, "documents": n_docs, "seq_len": a.seq, "rows": rows}, f, indent=1)
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
