"""Every format and decode option gives the same bytes, labels and order
through Python as through the C API (c_ref.c, built with pkg-config against
the installed library) on the same dataset and seed."""
import os
import subprocess
import zlib

import numpy as np
import pytest

import stoker
from test_install import build_ref, prefix  # noqa: F401 (the fixture)


@pytest.fixture(scope="module")
def c_ref(prefix, tmp_path_factory):  # noqa: F811
    out = str(tmp_path_factory.mktemp("cref") / "c_ref")
    build_ref(prefix, out, static=True)
    return out


def c_batches(c_ref, source, batch, shuffle, seed, decode="raw", dtype="u8", layout="hwc",
              size=0, evaluate=0, epochs=1):
    r = subprocess.run([c_ref, source, str(batch), shuffle, str(seed), decode, dtype, layout,
                        str(size), str(evaluate), str(epochs)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def py_batches(source, batch, shuffle, seed, decode="raw", dtype="u8", layout="hwc", size=224,
               evaluate=False, epochs=1):
    lines = []
    with stoker.Loader(source, batch, shuffle=shuffle, seed=seed, decode=decode, dtype=dtype,
                       layout=layout, size=size, eval=evaluate, epochs=epochs) as ld:
        for b in ld:
            data = np.asarray(b.data)
            if data.ndim > 1:  # fixed-size decode: samples back to back
                crc = zlib.crc32(data.tobytes())
            else:
                crc = 0
                for off, ln in zip(np.asarray(b.offsets), np.asarray(b.lengths)):
                    crc = zlib.crc32(data[int(off):int(off) + int(ln)].tobytes(), crc)
            pairs = " ".join(f"{i}:{y}" for i, y in zip(np.asarray(b.indices), np.asarray(b.labels)))
            lines.append(f"{b.epoch} {len(b)} {crc:08x} | {pairs}")
    return lines


@pytest.mark.parametrize("fmt", ["tfrecord", "wds", "npy", "npz", "mds", "files"])
@pytest.mark.parametrize("shuffle", ["none", "auto", "block"])
def test_raw_same_as_c(c_ref, datasets, fmt, shuffle):
    want = c_batches(c_ref, datasets[fmt], 24, shuffle, 5, epochs=2)
    got = py_batches(datasets[fmt], 24, shuffle, 5, epochs=2)
    assert got == want
    assert len(got) == 2 * 9  # 200 samples in 24s, two epochs
    labels = {int(p.split(":")[1]) for ln in got for p in ln.split("|")[1].split()}
    assert labels <= set(range(7)) and len(labels) > 1  # npy: from its class folder


@pytest.mark.parametrize("fmt", ["npy", "npz"])
def test_npy_decode_same_as_c(c_ref, datasets, fmt):
    want = c_batches(c_ref, datasets[fmt], 32, "global", 9, decode="npy")
    got = py_batches(datasets[fmt], 32, "global", 9, decode="npy")
    assert got == want and len(got) == 7


@pytest.mark.parametrize("fmt", ["jpeg_tfrecord", "jpeg_wds"])
@pytest.mark.parametrize("dtype", ["u8", "f32"])
@pytest.mark.parametrize("layout", ["hwc", "chw"])
@pytest.mark.parametrize("evaluate", [0, 1], ids=["train", "eval"])
def test_jpeg_decode_same_as_c(c_ref, datasets, fmt, dtype, layout, evaluate):
    want = c_batches(c_ref, datasets[fmt], 16, "global", 3, "jpeg", dtype, layout, 32, evaluate)
    got = py_batches(datasets[fmt], 16, "global", 3, "jpeg", dtype, layout, 32, bool(evaluate))
    assert got == want and len(got) == 3


def test_jpeg_shapes_and_dtypes(datasets):
    with stoker.Loader(datasets["jpeg_wds"], 8, decode="jpeg", size=(24, 40), layout="chw",
                       dtype="f32") as ld:
        b = next(ld)
        a = np.asarray(b.data)
        assert a.shape == (8, 3, 24, 40) and a.dtype == np.float32
        assert b.data.shape == (8, 3, 24, 40) and b.data.dtype == "float32"
        assert np.asarray(b[3]).shape == (3, 24, 40)
        assert np.array_equal(np.asarray(b[3]), a[3])
        assert np.isfinite(a).all() and a.min() < 0 < a.max()  # normalized
        del a
    with stoker.Loader(datasets["jpeg_wds"], 8, decode="jpeg", size=20) as ld:
        a = np.asarray(next(ld).data)
        assert a.shape == (8, 20, 20, 3) and a.dtype == np.uint8
