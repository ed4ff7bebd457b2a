"""Fidelity against torchvision on real photographs: stoker's JPEG decoder
with eval=True must give torchvision.transforms.v2's Resize(256) +
CenterCrop(224) (antialiased bilinear on the uint8 tensor that
torchvision.io.decode_jpeg returns) within PSNR >= 40 dB on every photo,
and the training path, its crop pinned to the whole image, its
Resize((224, 224)) (either way round, the flip being random).

The photos are the ones Debian's python3-sklearn and python3-skimage ship
(scikit-learn's china.jpg and flower.jpg, scikit-image's JPEG and PNG
photographs, the PNGs encoded here as JPEG at quality 90), found by
bench/photos.py (shared with P1) in their Debian or PyPI install folders
or in $STOKER_PHOTOS; never synthetic images, whose smoothness or noise
would flatter or punish a resize."""
import math
import os
import sys

import numpy as np
import pytest

from conftest import needs_torch

import stoker

# The photo finder is shared with P1 (bench/python.py); bench/ goes last on
# the path so that none of its scripts' names shadows a module.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from photos import photos  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")


def psnr(a, b):
    mse = float(((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse)


@pytest.fixture(scope="module")
def photo_set(tmp_path_factory):
    pytest.importorskip("torchvision")
    got = photos()
    if len(got) < 2:
        pytest.skip("no photographs found: install Debian's python3-sklearn and python3-skimage "
                    "(or set STOKER_PHOTOS to a folder of .jpg photos)")
    base = tmp_path_factory.mktemp("photos")
    out = {}
    for name, data in got.items():
        d = base / name / "c0"
        d.mkdir(parents=True)
        (d / (name + ".jpg")).write_bytes(data)
        out[name] = (str(base / name), data)
    return out


def reference(data):
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg
    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)


def first_sample(path, **kw):
    with stoker.Loader(path, 1, decode="jpeg", size=224, layout="chw", shuffle=False, **kw) as ld:
        return np.asarray(next(iter(ld))[0])


@needs_torch
def test_eval_within_40db_of_torchvision(photo_set):
    from torchvision.transforms.v2 import functional as F
    scores = {}
    for name, (path, data) in sorted(photo_set.items()):
        ref = F.center_crop(F.resize(reference(data), [256], antialias=True), [224, 224]).numpy()
        got = first_sample(path, eval=True)
        assert got.shape == ref.shape == (3, 224, 224)
        scores[name] = psnr(got, ref)
    table = ", ".join(f"{k} {v:.1f}" for k, v in scores.items())
    assert min(scores.values()) >= 40, f"PSNR (dB) against torchvision: {table}"
    # Far from the bar on photos: two-tap bilinear without antialiasing
    # gave a median of 35 dB here, the antialiased resize about 51.
    assert np.median(list(scores.values())) >= 45, table


@needs_torch
def test_train_resize_within_40db_of_torchvision(photo_set):
    """The whole image as the crop (scale 1, ratio W/H): what is left is
    RandomResizedCrop's resize to 224 x 224, and the flip."""
    from torchvision.transforms.v2 import functional as F
    scores = {}
    for name, (path, data) in sorted(photo_set.items()):
        img = reference(data)
        r = img.shape[2] / img.shape[1]
        ref = F.resize(img, [224, 224], antialias=True).numpy()
        got = first_sample(path, eval=False, scale=(1.0, 1.0), ratio=(r, r), seed=3)
        scores[name] = max(psnr(got, ref), psnr(got, ref[:, :, ::-1]))
    table = ", ".join(f"{k} {v:.1f}" for k, v in scores.items())
    assert min(scores.values()) >= 40, f"PSNR (dB) against torchvision: {table}"
