"""Dict samples (decode="fields", stoker.fields) in every format, checked
against each format's own reader where Python has one (tarfile for
WebDataset, numpy for npz/npy, the folder walk for class folders) and
against decode="raw" of each field, and the transform hook of
stoker.torch."""
import glob
import os
import tarfile

import numpy as np
import pytest

import stoker
import stoker.fields as F
from conftest import needs_torch

FORMATS = ("tfrecord", "wds", "npy", "npz", "mds", "files")


def all_samples(path, **kw):
    out = {}
    with stoker.Loader(path, 32, decode="fields", shuffle=False, **kw) as ld:
        for b in ld:
            for s in F.samples(b):
                # arrays view the batch: copies, so that its buffer goes back
                out[s["__index__"]] = {k: np.array(v) if isinstance(v, np.ndarray) else v
                                       for k, v in s.items()}
    return out


def raw_bytes(path, field):
    out = {}
    with stoker.Loader(path, 32, decode="raw", field=field, shuffle=False) as ld:
        for b in ld:
            idx = np.asarray(b.indices)
            for i in range(len(b)):
                out[int(idx[i])] = bytes(b[i])
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_sample_once_with_its_fields_and_label(datasets, fmt):
    got = all_samples(datasets[fmt])
    assert sorted(got) == list(range(200))
    labels = {}
    with stoker.Loader(datasets[fmt], 32, shuffle=False) as ld:
        for b in ld:
            for i, y in zip(np.asarray(b.indices), np.asarray(b.labels)):
                labels[int(i)] = int(y)
    for i, s in got.items():
        assert s["cls"] == labels[i] and 0 <= s["cls"] < 7
        names = [k for k in s if not k.startswith("__") and k != "cls"]
        assert names, s
    # Each untyped field's bytes are what decode="raw" gives for that field.
    first = got[0]
    for name, v in first.items():
        if name.startswith("__") or name == "cls" or not isinstance(v, bytes):
            continue
        raw = raw_bytes(datasets[fmt], name)
        for i, s in got.items():
            assert s[name] == raw[i], (fmt, name, i)


def test_webdataset_members_as_tarfile_reads_them(datasets):
    want = {}
    for shard in sorted(glob.glob(os.path.join(datasets["wds"], "*.tar"))):
        with tarfile.open(shard) as t:
            for m in t.getmembers():
                key, ext = m.name.split(".", 1)
                want.setdefault(key, {})[ext] = t.extractfile(m).read()
    got = {s["__key__"]: s for s in all_samples(datasets["wds"]).values()}
    assert set(got) == set(want)
    for key, members in want.items():
        for ext, data in members.items():
            v = got[key][ext]
            if ext == "cls":
                assert v == int(data)
            else:
                assert v == data


def test_npz_arrays_keep_dtype_and_shape(tmp_path):
    # One sample per file: each member is a .npy array of its own dtype and shape.
    p = str(tmp_path / "npz1")
    stoker.gen(p, 12, format="npz", size=40, classes=3, samples_per_shard=1, seed=4)
    by_key = {s["__key__"]: s for s in all_samples(p).values()}
    files = sorted(glob.glob(os.path.join(p, "**", "*.npz"), recursive=True))
    assert len(files) == 12
    for f in files:
        key = os.path.relpath(f, p)[:-4]
        with np.load(f) as z:
            for name in z.files:
                a, b = z[name], by_key[key][name]
                assert isinstance(b, np.ndarray) and b.dtype == a.dtype and b.shape == a.shape
                assert np.array_equal(a, b)


def test_npz_dlio_layout_gives_each_sample_its_slice(datasets):
    # DLIO's layout (x[..., i], y[i] in one file): x[..., i] gathered, in C order.
    got = all_samples(datasets["npz"])
    for f in sorted(glob.glob(os.path.join(datasets["npz"], "*.npz"))):
        key = os.path.basename(f)[:-4]
        with np.load(f) as z:
            x, y = z["x"], z["y"]
        for i in range(x.shape[-1]):
            (s,) = [s for s in got.values() if s["__key__"] == f"{key}/{i}"]
            assert s["x"].dtype == x.dtype and s["x"].shape == x.shape[:-1]
            assert np.array_equal(s["x"], x[..., i]) and s["cls"] == y[i]


@pytest.mark.parametrize("dtype,shape", [("uint8", (6, 5, 4)), ("float32", (3, 7, 2, 5)),
                                         ("int16", (9, 3))])
def test_npz_dlio_savez_records_are_x_last_axis_samples(tmp_path, dtype, shape):
    # As DLIO's npz generator writes them: np.savez(path, x=records,
    # y=record_labels), records' last axis the sample, labels a list.
    rng = np.random.default_rng(len(shape))
    xs = {}
    for k in range(3):
        x = (rng.random(shape) * 200).astype(dtype)
        y = [k * 10 + i for i in range(shape[-1])]
        np.savez(str(tmp_path / f"img_{k}_of_3.npz"), x=x, y=y)
        xs[f"img_{k}_of_3"] = (x, y)
    got = all_samples(str(tmp_path))
    raw = raw_bytes(str(tmp_path), "x")
    assert len(got) == len(raw) == 3 * shape[-1]
    for n, s in got.items():
        key, i = s["__key__"].rsplit("/", 1)
        x, y = xs[key]
        want = x[..., int(i)]
        assert s["x"].dtype == x.dtype and s["x"].shape == want.shape
        assert np.array_equal(s["x"], want) and s["cls"] == y[int(i)]
        assert raw[n] == np.ascontiguousarray(want).tobytes()  # decode="raw": its bytes


def test_npy_and_mds_typed_columns(datasets):
    got = all_samples(datasets["npy"])
    for s in got.values():
        (name,) = [k for k in s if not k.startswith("__") and k != "cls"]
        (f,) = glob.glob(os.path.join(datasets["npy"], "**", os.path.basename(s["__key__"]) + ".npy"),
                         recursive=True)
        assert np.array_equal(np.load(f), s[name]) and s[name].dtype == np.load(f).dtype
    mds = all_samples(datasets["mds"])
    for s in mds.values():
        # MDS records the label column's type: an int64 scalar, not bytes.
        assert s["label"].dtype == np.int64 and int(s["label"]) == s["cls"]


def test_class_folder_files_with_their_label(datasets):
    got = {s["__key__"]: s for s in all_samples(datasets["files"]).values()}
    classes = sorted(d for d in os.listdir(datasets["files"])
                     if os.path.isdir(os.path.join(datasets["files"], d)))
    n = 0
    for ci, c in enumerate(classes):
        for f in os.listdir(os.path.join(datasets["files"], c)):
            key = c + "/" + f
            s = got.get(key) or got[key.rsplit(".", 1)[0]]
            (name,) = [k for k in s if not k.startswith("__") and k != "cls"]
            with open(os.path.join(datasets["files"], c, f), "rb") as fh:
                assert s[name] == fh.read()
            assert s["cls"] == int(c) if c.isdigit() else s["cls"] == ci
            n += 1
    assert n == 200


def test_field_list_and_missing_field(datasets):
    got = all_samples(datasets["jpeg_wds"], field="cls")
    assert all(set(s) == {"cls", "__key__", "__index__"} for s in got.values())
    with pytest.raises(stoker.Error, match="no field 'png'"):
        all_samples(datasets["jpeg_wds"], field="jpg,png")
    with pytest.raises(ValueError, match="decoders: jpg: 'gif' is not a decoder"):
        F.check_decoders({"jpg": "gif"})
    with stoker.Loader(datasets["jpeg_wds"], 8) as ld:  # decode="raw"
        with pytest.raises(ValueError, match='not a fields batch'):
            F.sample(next(ld), 0)


def test_decoders_per_field(datasets):
    with stoker.Loader(datasets["jpeg_wds"], 8, decode="fields", shuffle=False) as ld:
        b = next(ld)
        s = F.sample(b, 0, {"jpg": "bytes", "cls": "text"})
        assert s["jpg"][:2] == b"\xff\xd8" and s["cls"].strip().isdigit()
        s = F.sample(b, 0, {"jpg": lambda m: len(m)})
        assert s["jpg"] == len(F.sample(b, 0, {"jpg": "bytes"})["jpg"])


@needs_torch
def test_torch_dict_batches_and_transform_pool(datasets):
    import threading

    import torch
    from torchvision.transforms import v2

    import stoker.torch as st
    seen = set()
    resize = v2.Resize((32, 32), antialias=True)

    def tf(s):
        seen.add(threading.current_thread().name)
        s["jpg"] = resize(s["jpg"])
        return s

    ds = st.StokerDataset(datasets["jpeg_wds"], 16, decode="fields", shuffle=False,
                          transform=tf, transform_threads=3, world_size=1, rank=0)
    want = st.StokerDataset(datasets["jpeg_wds"], 16, decode="jpeg", shuffle=False,
                            world_size=1, rank=0)
    n = 0
    for item, (_, y) in zip(ds, want):
        assert item["jpg"].shape == (len(y), 3, 32, 32) and item["jpg"].dtype == torch.uint8
        assert torch.equal(item["cls"], y)
        assert len(item["__key__"]) == len(y)
        n += len(y)
    assert n == 48
    assert any(t.startswith("stoker-transform") for t in seen)
    ds.close()

    # Without a resize the images keep their own sizes: a list.
    ds = st.StokerDataset(datasets["jpeg_wds"], 16, decode="fields", shuffle=False,
                          world_size=1, rank=0)
    item = next(iter(ds))
    assert isinstance(item["jpg"], list) and item["jpg"][0].shape[0] == 3


@needs_torch
def test_transform_on_jpeg_samples_and_batches(datasets):
    import torch

    import stoker.torch as st
    kw = dict(decode="jpeg", layout="chw", size=32, eval=True, shuffle=False, world_size=1,
              rank=0)
    plain = [x.clone() for x, _ in st.StokerDataset(datasets["jpeg_tfrecord"], 16, **kw)]
    flipped = [x for x, _ in st.StokerDataset(datasets["jpeg_tfrecord"], 16, **kw,
                                              transform=lambda t: t.flip(-1),
                                              transform_threads=2)]
    assert all(torch.equal(a.flip(-1), b) for a, b in zip(plain, flipped))
    whole = [x for x in st.StokerDataset(datasets["jpeg_tfrecord"], 16, **kw,
                                         transform=lambda xy: xy[0].float().mean(),
                                         transform_on="batch")]
    assert [float(v) for v in whole] == [float(p.float().mean()) for p in plain]
    with pytest.raises(ValueError, match="transform_on"):
        st.StokerDataset(datasets["jpeg_tfrecord"], 16, transform=abs, transform_on="x")
    with pytest.raises(ValueError, match="decoders: only with"):
        st.StokerDataset(datasets["jpeg_tfrecord"], 16, decoders={"jpg": "bytes"})


def test_webdataset_npy_members_of_any_dtype_and_order(tmp_path):
    # The library describes C-order little-endian arrays (their dtype and
    # shape from the header); the others (Fortran order, big-endian, bool)
    # are read by numpy's own header reader: all equal np.load's.
    d = tmp_path / "npywds"
    d.mkdir()
    rng = np.random.default_rng(3)
    want = {}
    with tarfile.open(d / "shard-000.tar", "w") as t:
        for k in range(6):
            arrs = {"npy": rng.standard_normal((2, 3)).astype(np.float32),
                    "ids.npy": np.arange(k + 1, dtype=np.int64),
                    "fort.npy": np.asfortranarray(rng.integers(0, 9, (3, 4), dtype=np.int16)),
                    "be.npy": np.arange(5, dtype=">i4"),
                    "mask.npy": np.array([True, False, k % 2 == 0]),
                    "scalar.npy": np.float64(k) * np.ones(())}
            key = f"{k:04d}"
            for name, a in arrs.items():
                bio = __import__("io").BytesIO()
                np.save(bio, a)
                info = tarfile.TarInfo(f"{key}.{name}")
                info.size = len(bio.getvalue())
                bio.seek(0)
                t.addfile(info, bio)
            want[key] = arrs
    got = {s["__key__"]: s for s in all_samples(str(d)).values()}
    assert set(got) == set(want)
    for key, arrs in want.items():
        for name, a in arrs.items():
            b = got[key][name]
            assert isinstance(b, np.ndarray), (name, b)
            assert b.shape == a.shape and b.dtype.newbyteorder("=") == a.dtype.newbyteorder("=")
            assert np.array_equal(a, b), name
    with stoker.Loader(str(d), 6, decode="fields", shuffle=False) as ld:
        b = next(ld)
        typed = {n: (dt, sh) for n, _, dt, sh in b._sample(0)[3]}
        assert typed["npy"] == ("float32", (2, 3)) and typed["ids.npy"] == ("int64", (1,))
        assert typed["fort.npy"] == (None, None) and typed["be.npy"] == (None, None)


@needs_torch
def test_collate_stacks_image_views_to_the_same_values():
    # Decoded images are CHW views of HWC pixels; collate stacks them through
    # numpy (torch.stack's byte-wise transpose was most of a P4 pass): the
    # values are torch.stack's, the batch channels-last in memory.
    import torch
    g = torch.Generator().manual_seed(0)
    imgs = [torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1)
            for _ in range(4)]
    out = F.collate([{"jpg": x, "cls": i} for i, x in enumerate(imgs)])
    assert out["jpg"].shape == (4, 3, 5, 7) and out["jpg"].dtype == torch.uint8
    assert torch.equal(out["jpg"], torch.stack(imgs))
    assert out["jpg"].is_contiguous(memory_format=torch.channels_last)
    assert out["cls"].tolist() == [0, 1, 2, 3]
    bf = F.collate([{"x": torch.ones(2, dtype=torch.bfloat16)}] * 3)["x"]  # no numpy dtype
    assert bf.shape == (3, 2) and bf.dtype == torch.bfloat16
