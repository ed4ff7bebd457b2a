"""Real photographs that Debian packages ship, for the fidelity tests
(python/tests/test_fidelity.py) and P1 (bench/python.py): scikit-learn's
china.jpg and flower.jpg and scikit-image's JPEG and PNG photographs
(python3-sklearn, python3-skimage), found in their Debian or PyPI install
folders or in $STOKER_PHOTOS; never synthetic images, whose smoothness or
noise would flatter or punish a resize or a decoder."""
import glob
import os
import random
import sys
import sysconfig

# scikit-image's photographs (the rest of its data is drawings, text and
# microscopy); both colour and grey.
SKIMAGE_PNGS = ("astronaut", "chelsea", "coffee", "motorcycle_left", "camera", "moon")
SKIMAGE_JPGS = ("rocket", "retina", "hubble_deep_field")


def photo_dirs():
    """[(folder, names or None for every .jpg and .png there)]."""
    roots = ["/usr/lib/python3/dist-packages", sysconfig.get_paths()["purelib"]]
    roots += [p for p in sys.path if p.endswith("-packages")]
    out = [(os.environ["STOKER_PHOTOS"], None)] if os.environ.get("STOKER_PHOTOS") else []
    for r in dict.fromkeys(roots):
        out.append((os.path.join(r, "sklearn", "datasets", "images"), ("china", "flower")))
        out.append((os.path.join(r, "skimage", "data"), SKIMAGE_JPGS + SKIMAGE_PNGS))
    return [(d, names) for d, names in out if os.path.isdir(d)]


def photo_paths():
    """{name: path}, the first file found for each photo."""
    found = {}
    for d, names in photo_dirs():
        for p in sorted(glob.glob(os.path.join(d, "*.jpg")) + glob.glob(os.path.join(d, "*.png"))):
            name = os.path.splitext(os.path.basename(p))[0]
            if name not in found and (names is None or name in names):
                found[name] = p
    return found


def photos():
    """{name: JPEG bytes}, one per photo found; PNGs encoded at quality 90."""
    import torch
    from torchvision.io import ImageReadMode, decode_image, encode_jpeg
    found = {}
    for name, p in photo_paths().items():
        with open(p, "rb") as f:
            data = f.read()
        if p.endswith(".png"):
            raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            img = decode_image(raw, mode=ImageReadMode.UNCHANGED)
            if img.shape[0] not in (1, 3):
                img = decode_image(raw, mode=ImageReadMode.RGB)
            data = encode_jpeg(img, quality=90).numpy().tobytes()
        found[name] = data
    return found


def crops(out, count, classes=10, seed=1, sizes=(300, 640), quality=(75, 95)):
    """Write `count` JPEGs cut from the photos into out/cNN/ class folders
    (image i in class i % classes): a random region of a random photo, of a
    random aspect between 3:4 and 4:3 and at least half the largest such
    region, rescaled (PIL, Lanczos) so both sides are within `sizes` and
    encoded by PIL at a random quality within `quality`, as RGB. The same
    seed gives the same files. Returns out; raises if no photo is found."""
    from PIL import Image
    paths = photo_paths()
    if not paths:
        raise RuntimeError("no photographs found: install Debian's python3-sklearn and "
                           "python3-skimage (or set STOKER_PHOTOS to a folder of .jpg photos)")
    imgs = []
    for name in sorted(paths):
        with Image.open(paths[name]) as im:
            imgs.append(im.convert("RGB"))
    rng = random.Random(seed)
    lo, hi = sizes
    for c in range(classes):
        os.makedirs(os.path.join(out, f"c{c:02d}"), exist_ok=True)
    for i in range(count):
        im = imgs[rng.randrange(len(imgs))]
        aspect = rng.uniform(3 / 4, 4 / 3)  # width / height
        w = rng.randint(lo, hi)
        h = min(hi, max(lo, round(w / aspect)))
        aspect = w / h
        W, H = im.size
        cw = min(W, round(H * aspect))  # the largest region of that aspect
        ch = min(H, round(cw / aspect))
        s = rng.uniform(0.5, 1.0) ** 0.5
        cw, ch = max(1, round(cw * s)), max(1, round(ch * s))
        x, y = rng.randint(0, W - cw), rng.randint(0, H - ch)
        img = im.resize((w, h), Image.LANCZOS, box=(x, y, x + cw, y + ch))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        img.save(os.path.join(out, f"c{i % classes:02d}", f"{i:06d}.jpg"), "JPEG",
                 quality=rng.randint(*quality))
    return out
