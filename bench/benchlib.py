"""Helpers shared by the benchmark drivers (loader.py, emulator.py): paths,
running stoker, warming files into the page cache, and the disk-read
counter recorded beside every page-cache figure."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
STK = os.path.join(BUILD, "stoker")
BENCH = os.path.join(BUILD, "bench")
NCORES = os.cpu_count() or 1


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def pgpgin_kib():
    """KiB read from block devices since boot (/proc/vmstat pgpgin)."""
    with open("/proc/vmstat") as f:
        for line in f:
            if line.startswith("pgpgin "):
                return int(line.split()[1])
    return 0


def files_of(d, suffix=""):
    out = []
    for base, _, names in os.walk(d):
        out += [os.path.join(base, n) for n in names if n.endswith(suffix)]
    return sorted(out)


def warm(files):
    """Read files whole, so the timed run that follows reads the page cache
    (the kernel here drops pages left untouched for about 30 s)."""
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 22):
                pass


def pgpgout_kib():
    """KiB written to block devices since boot (/proc/vmstat pgpgout)."""
    with open("/proc/vmstat") as f:
        for line in f:
            if line.startswith("pgpgout "):
                return int(line.split()[1])
    return 0
