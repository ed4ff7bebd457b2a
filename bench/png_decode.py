#!/usr/bin/python3
"""PNG decoding, stoker against PIL, in one process on the same files.

The files: N windows (ImageNet-like sizes, 300 to 500 px a side) cut at
random from the photographs scikit-learn and scikit-image ship (china,
flower, astronaut, chelsea, coffee, motorcycle_left), written as RGB PNGs
by PIL at its default compression, in class folders. Each round times,
on one thread and with the files in the page cache:

  pil-decode  Image.open(f).convert("RGB") and the pixels touched: the
              decode torchvision's ImageFolder does, without a transform
  pil-eval    the same, then torchvision's Resize(256) + CenterCrop(224)
              on the PIL image and PILToTensor (the evaluation transform)
  stoker-eval stoker.Loader(decode="jpeg", eval=True, threads=1): read,
              decode and the same evaluation transform, batches of 32

samples/s of wall time, and samples per CPU-second of this process (all
its threads: a shared machine's other load lowers the first, hardly the
second); the median of R interleaved rounds of each is printed.

  .venv/bin/python bench/png_decode.py [-n 300] [-r 3]"""
import argparse
import glob
import os
import statistics
import sys
import sysconfig
import tempfile
import time

import numpy as np
from PIL import Image

PHOTOS = ("china", "flower", "astronaut", "chelsea", "coffee", "motorcycle_left")


def photo_paths():
    roots = ["/usr/lib/python3/dist-packages", sysconfig.get_paths()["purelib"]]
    out = {}
    for r in roots:
        for sub in ("sklearn/datasets/images", "skimage/data"):
            for p in glob.glob(os.path.join(r, sub, "*")):
                name = os.path.splitext(os.path.basename(p))[0]
                if name in PHOTOS and name not in out:
                    out[name] = p
    return [out[k] for k in sorted(out)]


def make_files(d, n, seed=0):
    rng = np.random.default_rng(seed)
    photos = [np.asarray(Image.open(p).convert("RGB")) for p in photo_paths()]
    if not photos:
        sys.exit("png_decode: no photographs found (scripts/install-deps bench installs them)")
    paths = []
    for i in range(n):
        ph = photos[i % len(photos)]
        h, w = ph.shape[:2]
        cw, ch = min(w, int(rng.integers(300, 501))), min(h, int(rng.integers(300, 501)))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        p = os.path.join(d, f"c{i % 10}", f"{i:05d}.png")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        Image.fromarray(ph[y:y + ch, x:x + cw]).save(p, "PNG")
        paths.append(p)
    return paths


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            f.read()


def pil_decode(paths):
    for p in paths:
        with Image.open(p) as im:
            np.asarray(im.convert("RGB")).sum()


def pil_eval(paths):
    from torchvision import transforms
    t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                            transforms.PILToTensor()])
    for p in paths:
        with Image.open(p) as im:
            t(im.convert("RGB"))


def stoker_eval(d):
    import stoker
    n = 0
    with stoker.Loader(d, 32, decode="jpeg", eval=True, threads=1, shuffle=False,
                       on_error="fail") as ld:
        for b in ld:
            n += len(b)
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=300, help="files (default 300)")
    ap.add_argument("-r", type=int, default=3, help="rounds (default 3)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="png-bench-") as d:
        paths = make_files(d, a.n)
        mb = sum(os.path.getsize(p) for p in paths) / 1e6
        print(f"{len(paths)} PNGs, {mb:.1f} MB, load average {os.getloadavg()[0]:.2f}")
        runs = {"pil-decode": [], "pil-eval": [], "stoker-eval": []}
        cpu = {k: [] for k in runs}
        for r in range(a.r):
            for name in runs:
                warm(paths)
                t0, c0 = time.perf_counter(), time.process_time()
                if name == "stoker-eval":
                    assert stoker_eval(d) == len(paths)
                else:
                    (pil_decode if name == "pil-decode" else pil_eval)(paths)
                runs[name].append(len(paths) / (time.perf_counter() - t0))
                cpu[name].append(len(paths) / (time.process_time() - c0))
        print(f"{'':12s} {'samples/s':>10s} {'per CPU-s':>10s}  rounds (samples/s)")
        for name, v in runs.items():
            print(f"{name:12s} {statistics.median(v):10.1f} {statistics.median(cpu[name]):10.1f}  "
                  + ", ".join(f"{x:.1f}" for x in v))


if __name__ == "__main__":
    main()
