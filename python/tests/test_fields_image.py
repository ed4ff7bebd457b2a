"""Image fields decoded by the loader's C workers (image_fields=, the
default of stoker.torch with decode="fields"): pixel for pixel what the
Python-side decode (torchvision.io.decode_image) and PIL's
convert("RGB") give, for JPEG (4:2:0, 4:2:2, 4:4:4, grey), PNG (RGB,
grey, RGBA, palette) and WebP (lossy, lossless) members of different
sizes, in both layouts; a size applies decode="jpeg"'s transform."""
import io
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

import stoker
import stoker.fields as F
from conftest import needs_torch

SIZES = [(37, 53), (64, 48), (33, 17), (120, 91)]
KINDS = [("jpg", "JPEG", "RGB", {"quality": 90}), ("jpg", "JPEG", "RGB", {"subsampling": 0}),
         ("jpg", "JPEG", "RGB", {"subsampling": 1}), ("jpg", "JPEG", "L", {}),
         ("png", "PNG", "RGB", {}), ("png", "PNG", "L", {}), ("png", "PNG", "RGBA", {}),
         ("png", "PNG", "P", {}), ("webp", "WEBP", "RGB", {"quality": 80}),
         ("webp", "WEBP", "RGB", {"lossless": True})]


def picture(h, w, seed):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // (w - 1), y * 255 // (h - 1), (x + y) * 3 % 256], -1)
    tex = np.random.default_rng(seed).integers(0, 40, (h, w, 3))
    return Image.fromarray((base // 2 + tex).astype(np.uint8))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A WebDataset shard: one image member (each kind at each size) and a
    cls per sample; {key: encoded bytes}."""
    d = tmp_path_factory.mktemp("img_wds")
    enc = {}
    with tarfile.open(os.path.join(d, "s-000.tar"), "w") as tf:
        k = 0
        for h, w in SIZES:
            for ext, fmt, mode, kw in KINDS:
                b = io.BytesIO()
                picture(h, w, k).convert(mode).save(b, fmt, **kw)
                key = f"{k:04d}"
                enc[key] = (ext, b.getvalue())
                for e, data in ((ext, b.getvalue()), ("cls", str(k % 5).encode())):
                    ti = tarfile.TarInfo(f"{key}.{e}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
                k += 1
    return str(d), enc


def by_key(path, layout="hwc", **kw):
    out = {}
    with stoker.Loader(path, 8, decode="fields", shuffle=False, layout=layout, **kw) as ld:
        for b in ld:
            for s in F.samples(b, layout=layout):
                out[s["__key__"]] = {k: (v.clone() if hasattr(v, "clone") else v)
                                     for k, v in s.items()}
    return out


@needs_torch
@pytest.mark.parametrize("layout", ["hwc", "chw"])
def test_c_decode_equals_python_decode_and_pil(images, layout):
    import torch
    path, enc = images
    c = by_key(path, layout, image_fields="*")
    py = by_key(path)  # no image_fields: the Python decoder (torchvision)
    assert sorted(c) == sorted(enc)
    for key, (ext, data) in enc.items():
        got = c[key][ext]
        pil = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert got.dtype == torch.uint8 and got.shape == (3,) + pil.shape[:2], key
        assert torch.equal(got, py[key][ext]), (key, ext)
        assert np.array_equal(got.permute(1, 2, 0).numpy(), pil), (key, ext)
        assert c[key]["cls"] == int(key) % 5


@pytest.fixture(scope="module")
def triples(tmp_path_factory):
    """12 samples, each a jpg, a png and a lossless webp of one picture
    (sizes differing between samples) and a cls."""
    d = tmp_path_factory.mktemp("img3_wds")
    with tarfile.open(os.path.join(d, "s-000.tar"), "w") as tf:
        for k in range(12):
            h, w = SIZES[k % len(SIZES)]
            pic = picture(h, w, k)
            for ext, fmt in (("jpg", "JPEG"), ("png", "PNG"), ("webp", "WEBP"), ("cls", None)):
                b = io.BytesIO()
                if fmt:
                    pic.save(b, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
                else:
                    b.write(str(k % 5).encode())
                ti = tarfile.TarInfo(f"{k:04d}.{ext}")
                ti.size = len(b.getvalue())
                tf.addfile(ti, io.BytesIO(b.getvalue()))
    return str(d)


def test_image_fields_list_and_errors(triples):
    with stoker.Loader(triples, 12, decode="fields", shuffle=False, image_fields="*,-png") as ld:
        s = F.samples(next(ld), {"png": "bytes", "jpg": "bytes", "webp": "bytes"})[0]
    assert s["png"][:4] == b"\x89PNG"  # left as stored
    assert not isinstance(s["jpg"], bytes) and not isinstance(s["webp"], bytes)  # decoded in C
    assert F.image_fields(None) == "*"
    assert F.image_fields({"png": "bytes", "seg.bin": "image", "json": "json"}) == "*,-png,seg.bin"
    with pytest.raises(ValueError, match="image_fields: only with decode"):
        stoker.Loader(triples, 8, image_fields="*")


@needs_torch
def test_torch_default_decodes_in_c_lists_mixed_sizes_stacks_a_size(triples):
    import torch

    import stoker.torch as st
    ds = st.StokerDataset(triples, 12, decode="fields", shuffle=False, world_size=1, rank=0)
    assert ds.options["image_fields"] == "*"
    item = next(iter(ds))
    # Images of different sizes: a list of (3, H, W) uint8 tensors.
    assert isinstance(item["jpg"], list) and len(item["jpg"]) == 12
    assert {tuple(v.shape) for v in item["webp"]} == {(3, h, w) for h, w in SIZES}
    assert all(torch.equal(a, b) for a, b in zip(item["png"], item["webp"]))  # both lossless
    assert torch.equal(item["cls"], torch.arange(12) % 5)
    ds.close()
    # A decoder of the user's for png: png left to Python, as bytes.
    ds = st.StokerDataset(triples, 12, decode="fields", shuffle=False, world_size=1, rank=0,
                          decoders={"png": "bytes"})
    assert ds.options["image_fields"] == "*,-png"
    item = next(iter(ds))
    assert all(isinstance(v, bytes) for v in item["png"])
    ds.close()
    # A size: decode="jpeg"'s transform, stacked, the same pixels as
    # decode="jpeg" gives the field.
    for ev in (True, False):
        kw = dict(shuffle=False, world_size=1, rank=0, size=(24, 32), eval=ev, seed=3)
        ds = st.StokerDataset(triples, 5, decode="fields", field="jpg,cls", **kw)
        want = st.StokerDataset(triples, 5, decode="jpeg", field="jpg", **kw)
        n = 0
        for item, (x, _) in zip(ds, want):
            assert item["jpg"].shape == (len(x), 3, 24, 32) and item["jpg"].dtype == torch.uint8
            assert torch.equal(item["jpg"], x.permute(0, 3, 1, 2))
            n += len(x)
        assert n == 12
        ds.close()
        want.close()
