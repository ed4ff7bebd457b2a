#!/usr/bin/python3
"""B2 baseline: PyTorch's DataLoader reading the same TFRecord shards that
stoker reads, with the offsets from the same DALI .idx files, batch 64.

For each num_workers setting prints one JSON line: samples/s and CPU-seconds
per 1000 samples (this process plus its worker processes). The Dataset does
what a minimal hand-written TFRecord reader does: one pread per record,
length check, payload as a uint8 tensor; it does not verify CRCs (stoker
does, so the comparison favours PyTorch)."""
import glob
import json
import os
import resource
import struct
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class TFRecordDataset(Dataset):
    def __init__(self, root):
        self.files = sorted(glob.glob(os.path.join(root, "*.tfrecord")))
        self.index = []  # (file number, offset, record bytes)
        for i, f in enumerate(self.files):
            with open(f + ".idx") as idx:
                for line in idx:
                    off, size = line.split()[:2]
                    self.index.append((i, int(off), int(size)))
        self.fds = {}

    def __len__(self):
        return len(self.index)

    def __getitem__(self, n):
        i, off, size = self.index[n]
        fd = self.fds.get(i)
        if fd is None:
            fd = self.fds[i] = os.open(self.files[i], os.O_RDONLY)
        rec = os.pread(fd, size, off)
        (length,) = struct.unpack_from("<Q", rec, 0)
        if length + 16 != len(rec):
            raise ValueError(f"{self.files[i]}: offset {off}: bad record length")
        return torch.frombuffer(bytearray(rec[12 : 12 + length]), dtype=torch.uint8)


def cpu_seconds():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run(root, workers, batch, epochs):
    torch.set_num_threads(1)
    ds = TFRecordDataset(root)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    n = 0
    # Its best setting: workers persist across epochs (start-up is paid once).
    dl = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                    persistent_workers=workers > 0)
    for _ in range(epochs):
        for b in dl:
            n += b.shape[0]
    del dl
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    return {"num_workers": workers, "samples": n, "seconds": wall,
            "samples_per_s": n / wall, "cpu_s_per_1000": 1000 * cpu / n}


if __name__ == "__main__":
    root, workers = sys.argv[1], int(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    print(json.dumps(run(root, workers, batch, epochs)))
