"""PNG and WebP through the loader, as torchvision's ImageFolder gets them
(PIL's Image.convert("RGB")): pixel-exact decodes of lossless files in
every PNG mode, the format told by the bytes (ImageNet's PNG named .JPEG),
and the per-sample error policy on corrupt and truncated images: skipped
and counted by default, raised (naming the file) under on_error="fail"."""
import os

import numpy as np
import pytest
from PIL import Image

import stoker


def noise_rgb(seed, w=256, h=256):
    """Random pixels with smooth parts, so palettes and PNG filters get
    both kinds of content."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    img[: h // 2, :, 0] = np.linspace(0, 255, w, dtype=np.uint8)
    return img


def decode_one(path, **kw):
    """The one image of a class folder, decoded by the evaluation transform
    at 224: for a 256 x 256 image an identity resize and a centre crop at
    (16, 16), so the output is the decoded pixels."""
    with stoker.Loader(os.path.dirname(path), 1, shuffle=False, decode="jpeg", eval=True,
                       threads=1, on_error="fail", **kw) as ld:
        batches = [np.asarray(b.data).copy() for b in ld]
    assert len(batches) == 1
    return batches[0][0]


def pil_centre(path):
    with Image.open(path) as im:
        rgb = np.asarray(im.convert("RGB"))
    return rgb[16:240, 16:240]


# (name, PIL mode, save options): lossless files in each mode PIL writes.
CASES = [
    ("rgb", "RGB", {}),
    ("grey", "L", {}),
    ("rgba", "RGBA", {}),
    ("grey_alpha", "LA", {}),
    ("palette", "P", {}),
    ("palette_trns", "P", {"transparency": 3}),
    ("bilevel", "1", {}),
]


@pytest.mark.parametrize("name,mode,opts", CASES, ids=[c[0] for c in CASES])
def test_png_modes_pixel_exact_against_pil(tmp_path, name, mode, opts):
    im = Image.fromarray(noise_rgb(1))
    if mode == "RGBA" or mode == "LA":
        im = im.convert(mode[:-1])
        im.putalpha(Image.fromarray(noise_rgb(2)[:, :, 0]))
    elif mode == "P":
        im = im.quantize(16)
    else:
        im = im.convert(mode)
    path = tmp_path / "d" / "c0" / f"{name}.png"
    path.parent.mkdir(parents=True)
    im.save(path, "PNG", **opts)
    assert np.array_equal(decode_one(str(path)), pil_centre(str(path)))


def test_png_16bit_rgb_pixel_exact_against_pil(tmp_path):
    # 16-bit colour: PIL keeps each sample's high byte, and so does stoker.
    # (16-bit grey is the exception: PIL clips it at 255, stoker scales
    # it; docs/formats.md.)
    hi = noise_rgb(3).astype(np.uint16)
    arr = (hi << 8) | noise_rgb(4).astype(np.uint16)
    path = tmp_path / "d" / "c0" / "deep.png"
    path.parent.mkdir(parents=True)
    # PIL cannot write 16-bit RGB: the PNG is put together here.
    import struct
    import zlib
    raw = b"".join(b"\0" + arr[y].astype(">u2").tobytes() for y in range(arr.shape[0]))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 256, 256, 16, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    path.write_bytes(png)
    assert np.array_equal(decode_one(str(path)), pil_centre(str(path)))


def test_webp_lossless_pixel_exact_against_pil(tmp_path):
    for mode in ("RGB", "RGBA"):
        im = Image.fromarray(noise_rgb(5))
        if mode == "RGBA":
            im.putalpha(Image.fromarray(noise_rgb(6)[:, :, 1]))
        path = tmp_path / mode / "c0" / "x.webp"
        path.parent.mkdir(parents=True)
        im.save(path, "WEBP", lossless=True)
        assert np.array_equal(decode_one(str(path)), pil_centre(str(path)))


def test_png_named_jpeg_decodes(tmp_path):
    # ImageNet's training set has a PNG saved as .JPEG (n02105855_2933).
    path = tmp_path / "d" / "n02105855" / "n02105855_2933.JPEG"
    path.parent.mkdir(parents=True)
    Image.fromarray(noise_rgb(7)).save(path, "PNG")
    assert np.array_equal(decode_one(str(path)), pil_centre(str(path)))


def image_folder(tmp_path, n=12):
    """n JPEG, PNG and WebP files, two classes; returns the paths."""
    paths = []
    fmts = [("JPEG", ".jpg"), ("PNG", ".png"), ("WEBP", ".webp")]
    for i in range(n):
        fmt, ext = fmts[i % 3]
        p = tmp_path / "d" / f"c{i % 2}" / f"{i:03d}{ext}"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(noise_rgb(10 + i, 120, 90)).save(p, fmt)
        paths.append(p)
    return paths


def run(src, **kw):
    n = skipped = 0
    with stoker.Loader(src, 4, decode="jpeg", size=32, threads=2, **kw) as ld:
        for b in ld:
            n += len(b)
            skipped += b.skipped
        st = ld.stats()
    assert st["skipped"] == skipped
    return n, skipped


@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_bad_image_skipped_by_default_raised_on_fail(tmp_path, damage):
    paths = image_folder(tmp_path)
    assert run(str(tmp_path / "d")) == (12, 0)
    bad = paths[4]  # a PNG
    data = bad.read_bytes()
    if damage == "corrupt":
        data = data[:200] + bytes(b ^ 0x5A for b in data[200:260]) + data[260:]
    else:
        data = data[: len(data) // 2]
    bad.write_bytes(data)
    assert run(str(tmp_path / "d")) == (11, 1)
    assert run(str(tmp_path / "d"), on_error="skip") == (11, 1)
    with pytest.raises(stoker.Error) as ei:
        run(str(tmp_path / "d"), on_error="fail")
    assert bad.name in str(ei.value) and "png: " in str(ei.value), str(ei.value)


def test_all_samples_bad_raises_by_default(tmp_path):
    # 70 files that are no image: a wrong dataset, not a few bad files.
    d = tmp_path / "d" / "c0"
    d.mkdir(parents=True)
    for i in range(70):
        (d / f"{i:03d}.jpg").write_bytes(b"not an image at all " * 10)
    with pytest.raises(stoker.Error, match="in a row failed"):
        run(str(tmp_path / "d"))
    assert run(str(tmp_path / "d"), on_error="skip") == (0, 70)


def test_on_error_values():
    with pytest.raises(ValueError, match="on_error"):
        stoker.Loader("/nonexistent", on_error="ignore")


def test_gen_writes_png_and_webp(tmp_path):
    # stoker.gen(image_format=) for tests and benches: the files are what
    # they say, and decode.
    for fmt, pil in (("png", "PNG"), ("webp", "WEBP")):
        src = str(tmp_path / fmt)
        stoker.gen(src, 6, format="files", jpeg=(40, 30, 60, 50), classes=2, image_format=fmt)
        files = [os.path.join(r, f) for r, _, fs in os.walk(src) for f in fs if f.endswith(fmt)]
        assert len(files) == 6
        for f in files:
            with Image.open(f) as im:
                assert im.format == pil
        assert run(src, on_error="fail") == (6, 0)
    with pytest.raises(stoker.Error, match="gif"):
        stoker.gen(str(tmp_path / "g"), 2, format="files", jpeg=(4, 4, 4, 4), image_format="gif")
