"""Fixtures of the stoker Python tests: the repository, the CLI, and small
generated datasets (once per session, under pytest's temporary directory)."""
import os
import subprocess
import sys

import pytest

ROOT = os.environ.get("STOKER_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STOKER_BIN = os.environ.get("STOKER_BIN") or os.path.join(ROOT, "build", "stoker")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:  # only in an environment without torch
    HAVE_TORCH = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (scripts/install-deps python puts it in .venv)")

import stoker  # noqa: E402


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def datasets(tmp_path_factory):
    """{name: path}: 200 random-payload samples with labels in every
    format, and 48 labelled JPEGs (tfrecord and wds)."""
    base = tmp_path_factory.mktemp("ds")
    out = {}
    for fmt in ("tfrecord", "wds", "npy", "npz", "mds", "files"):
        p = str(base / f"raw_{fmt}")
        stoker.gen(p, 200, format=fmt, size=3000, stdev=1000 if fmt not in ("npy", "npz") else 0,
                   classes=7, samples_per_shard=50, seed=11)
        out[fmt] = p
    for fmt in ("tfrecord", "wds"):
        p = str(base / f"jpeg_{fmt}")
        stoker.gen(p, 48, format=fmt, jpeg=(40, 40, 90, 90), classes=5, samples_per_shard=16, seed=12)
        out["jpeg_" + fmt] = p
    return out


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def threads():
    return len(os.listdir("/proc/self/task"))


def run_py(code, timeout=120, env=None):
    """Run code in a fresh interpreter (this one's), returning CompletedProcess."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=e)
