"""The Python API as a user discovers it: help(stoker.Loader) documents
every option of the signature; stats() has the C JSON's keys; report()
prints the stage table and a verdict; the option names are the CLI's."""
import inspect
import io
import re
import subprocess

import pytest
import stoker
from conftest import STOKER_BIN


def test_help_documents_every_option():
    sig = inspect.signature(stoker.Loader)
    names = [p for p in sig.parameters if p != "self"]
    assert names[:2] == ["source", "batch_size"] and len(names) > 40
    doc = stoker.Loader.__doc__
    missing = [n for n in names if not re.search(r"\b%s\b" % n, doc)]
    assert missing == [], f"options missing from the docstring: {missing}"


def test_option_names_follow_the_cli():
    """Every `stoker feed` option has a Loader option of the same name
    (dashes as underscores), except those that only the CLI has."""
    usage = subprocess.run([STOKER_BIN, "help", "feed"], capture_output=True, text=True).stdout
    cli = set(re.findall(r"--([a-z0-9-]+)", usage))
    only_cli = {"consumer-ms", "limit", "save-state", "json", "quiet", "no-verify", "s3-path-style",
                "s3-virtual-host", "batch"}
    params = set(inspect.signature(stoker.Loader).parameters)
    renamed = {"no-verify": "verify"}
    missing = [o for o in cli - only_cli if o.replace("-", "_") not in params and renamed.get(o) not in params]
    assert missing == [], missing


def test_stats_and_report(datasets):
    with stoker.Loader(datasets["tfrecord"], 32, threads=2) as ld:
        n = sum(len(b) for b in ld)
        st = ld.stats()
        out = io.StringIO()
        verdict = ld.report(file=out)
    assert n == 200 and st["samples"] == 200 and st["batches"] == 7
    for k in ("wall_s", "consumer_wait_s", "ring_depth", "mem_bytes", "stages"):
        assert k in st, k
    assert [s["name"] for s in st["stages"]] == ["read", "decode", "batch", "ring"]
    assert st["stages"][1]["threads"] == 2
    text = out.getvalue()
    assert "decode" in text and "verdict: " + verdict in text
    assert verdict.startswith(("input-bound", "input kept up"))


def test_info_of_a_dataset_counted_as_it_arrives(tmp_path):
    # Through a cache without a manifest, the shards are counted as the
    # loader reaches them: a few of 40 at the start (the ring, one batch
    # deep, lets the reader run only a few batches ahead of this thread),
    # all after an epoch.
    src = str(tmp_path / "src")
    stoker.gen(src, 2000, format="tfrecord", size=64, classes=3, samples_per_shard=50, seed=5)
    with stoker.Loader(src, 20, cache_dir=str(tmp_path / "c"), window=50, prefetch=1,
                       prefetch_max=1) as ld:
        info = ld.dataset_info()
        assert (info["samples_complete"], info["shards"]) == (False, 40)
        assert 50 <= info["samples"] < 2000
        n = sum(len(b) for b in ld)
        assert n == 2000
        info = ld.dataset_info()
        assert (info["samples"], info["samples_complete"]) == (2000, True)


def test_repr_and_info(datasets):
    with stoker.Loader(datasets["mds"], 16) as ld:
        assert "stoker.Loader" in repr(ld)
        info = ld.dataset_info()
        assert info == {"samples": 200, "samples_complete": True, "shards": 4, "format": "mds"}
        assert ld.engine in ("io_uring", "pread", "mapcopy")
        b = next(ld)
        assert "n=16" in repr(b) and "uint8" in repr(b.data)


def test_mean_or_std_alone_keeps_the_other_default(datasets):
    # A mean given alone is used with ImageNet's std; a std alone with
    # ImageNet's mean (neither is ignored, neither zeroes the other).
    import numpy as np
    im_mean = np.array([123.675, 116.28, 103.53], dtype=np.float64)
    im_std = np.array([58.395, 57.12, 57.375], dtype=np.float64)

    def first(**kw):
        with stoker.Loader(datasets["jpeg_tfrecord"], 8, decode="jpeg", dtype="f32", eval=True,
                           size=32, shuffle=False, **kw) as ld:
            return np.asarray(next(ld).data, dtype=np.float64).copy()  # (n, H, W, 3)

    base = first()
    pixels = base * im_std + im_mean
    assert np.allclose(first(mean=(0, 0, 0)), pixels / im_std, atol=1e-3)
    assert np.allclose(first(std=(1, 1, 1)), pixels - im_mean, atol=1e-2)
    assert np.allclose(first(mean=(10, 20, 30)), (pixels - (10, 20, 30)) / im_std, atol=1e-3)
    with pytest.raises(ValueError, match="mean"):
        first(mean=(float("nan"), 0, 0))


def test_no_stat_per_file_at_open(tmp_path):
    # 2,000 class-folder files: opening, the first batch and the first
    # state() (which fingerprints the dataset) ask the file system nothing
    # per file (the fingerprint stat'ed every file: 1.28 million calls per
    # rank for ImageNet).
    import shutil
    import sys
    strace = shutil.which("strace")
    assert strace, "strace is missing (scripts/install-deps test installs it)"
    src = str(tmp_path / "cf")
    stoker.gen(src, 2000, format="files", size=16, classes=4, seed=1)
    code = ("import stoker, sys\n"
            "with stoker.Loader(sys.argv[1], 16) as ld:\n"
            "    next(ld)\n"
            "    assert ld.state()['dataset'] != 0\n")
    log = str(tmp_path / "strace.log")
    r = subprocess.run([strace, "-f", "-qq", "-e", "trace=stat,lstat,newfstatat,statx", "-o", log,
                        sys.executable, "-c", code, src], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(log) as f:
        per_file = [ln for ln in f if src + "/" in ln]
    assert len(per_file) < 20, f"{len(per_file)} stat calls on the dataset's files: {per_file[:3]}"
