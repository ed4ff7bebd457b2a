"""stoker.torch in a training setting: two processes under torch.distributed
(gloo, loopback) read disjoint shares that together cover the epoch; a
DataLoader with workers shards across them; a small CNN trained through
stoker.torch on generated labelled JPEGs lowers its loss."""
import os
import socket
import textwrap

import pytest

from conftest import needs_torch, run_py

pytestmark = needs_torch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_gloo_disjoint_cover(datasets, tmp_path):
    port = free_port()
    code = textwrap.dedent(f"""
        import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
        import stoker.torch as st

        def work(rank):
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}")
            dist.init_process_group("gloo", rank=rank, world_size=2)
            ds = st.StokerDataset({datasets['npz']!r}, 16, seed=5, return_indices=True)
            assert ds.rank_world() == (rank, 2)
            mine = [int(i) for _, _, idx in ds for i in idx]
            got = [None, None]
            dist.all_gather_object(got, mine)
            if rank == 0:
                a, b = set(got[0]), set(got[1])
                assert len(a) == len(got[0]) and len(b) == len(got[1]), "duplicates"
                assert not (a & b), "shares overlap"
                assert a | b == set(range(200)), "shares do not cover the epoch"
                print("OK", len(a), len(b))
            dist.destroy_process_group()

        if __name__ == "__main__":
            mp.spawn(work, nprocs=2)
    """)
    script = tmp_path / "ddp.py"
    script.write_text(code)
    import subprocess
    import sys
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK 100 100" in r.stdout


def test_rank_world_from_environment(datasets):
    import numpy as np
    import stoker
    r = run_py(textwrap.dedent(f"""
        import stoker.torch as st
        ds = st.StokerDataset({datasets['tfrecord']!r}, 10, seed=4, return_indices=True)
        print(ds.rank_world())
        print(sorted(int(i) for _, _, idx in ds for i in idx))
    """), env={"RANK": "1", "WORLD_SIZE": "3"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "(1, 3)"
    with stoker.Loader(datasets["tfrecord"], 10, seed=4, rank=1, world=3) as ld:
        want = sorted(int(i) for b in ld for i in np.asarray(b.indices))
    assert lines[1] == str(want) and 60 <= len(want) <= 70


def test_dataloader_workers_shard(datasets):
    import torch
    import stoker.torch as st
    ds = st.StokerDataset(datasets["tfrecord"], 10, seed=2, rank=0, world_size=1, return_indices=True,
                          threads=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    seen = [int(i) for _, _, idx in dl for i in idx]
    assert sorted(seen) == list(range(200))  # disjoint, and together the epoch
    with pytest.raises(RuntimeError, match="num_workers=0"):
        # The main process's copy never saw the workers' positions.
        ds.state_dict()


def make_jpeg_classes(root, n_per_class=48, size=48):
    """Four classes of JPEGs whose label is visible in the pixels: the
    colour channel that dominates (class 3: dark), with noise."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for c in range(4):
        d = os.path.join(root, f"class{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(n_per_class):
            img = rng.integers(0, 90, (size, size, 3), dtype=np.uint8)
            if c < 3:
                img[..., c] = rng.integers(150, 255, (size, size), dtype=np.uint8)
            Image.fromarray(img).save(os.path.join(d, f"{i:04d}.jpg"), quality=90)


def test_small_model_learns_through_stoker(tmp_path):
    import torch
    import torch.nn as nn
    import stoker.torch as st
    torch.manual_seed(0)
    torch.set_num_threads(1)
    root = str(tmp_path / "imgs")
    make_jpeg_classes(root)
    data = st.loader(root, 32, decode="jpeg", size=24, layout="chw", dtype="f32", seed=1,
                     format="files", rank=0, world_size=1, threads=2)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(8 * 16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, steps, labels_seen = [], 0, set()
    while steps < 240:
        for x, y in data:
            assert x.shape == (32, 3, 24, 24) or x.shape[0] < 32
            assert x.dtype == torch.float32 and y.dtype == torch.int64
            labels_seen |= set(y.tolist())
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            steps += 1
    assert labels_seen == {0, 1, 2, 3}
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    assert last < 0.5 * first, (first, last)
    st_ = data.stats()
    assert st_["samples"] > 0 and st_["stages"][1]["name"] == "decode"


def test_equal_size_samples_in_any_order(tmp_path):
    # The loader fills a batch in read order, so a batch's samples may lie
    # backwards in its memory (66 records, batch 64: the last batch of a
    # shuffled epoch often does); every row must still be its sample's bytes.
    import numpy as np
    import stoker
    import stoker.torch as st
    src = str(tmp_path / "ds")
    stoker.gen(src, 66, format="tfrecord", size=100, stdev=0, classes=3, seed=1)
    ref = {}
    with stoker.Loader(src, 66, shuffle=False) as ld:
        b = next(ld)
        for j, i in enumerate(np.asarray(b.indices).tolist()):
            ref[i] = bytes(np.asarray(b[j]))
    assert len(ref) == 66
    for seed in range(10):
        seen = 0
        for x, _, idx in st.StokerDataset(src, 64, shuffle=True, seed=seed, return_indices=True):
            assert tuple(x.shape) == (len(idx), 100)
            for row, i in zip(x, idx.tolist()):
                assert bytes(row.numpy()) == ref[i], f"seed {seed}: sample {i}"
            seen += len(idx)
        assert seen == 66


def test_rank_with_no_batches_ends_at_once(tmp_path):
    # One sample, world size 2: with uneven shares rank 1 gets none, with
    # drop shares neither does, and with drop_last neither gets a batch of 4. Each pass must end at once; the loader (opened
    # for 2^31 epochs) spun through every empty epoch (about an hour of CPU
    # with drop_last).
    import stoker
    src = str(tmp_path / "ds")
    stoker.gen(src, 1, format="tfrecord", size=100, seed=1)
    code = textwrap.dedent(f"""
        import stoker.torch as st
        for rank, kw in ((1, {{"shares": "uneven"}}), (0, {{"drop_last": True}}),
                         (1, {{"drop_last": True}}), (0, {{"shares": "drop"}})):
            ds = st.StokerDataset({src!r}, 4, rank=rank, world_size=2, **kw)
            for epoch in range(3):
                assert sum(1 for _ in ds) == 0, (rank, kw, epoch)
        for rank in (0, 1):  # pad (the default): each rank gets the one sample
            ds = st.StokerDataset({src!r}, 4, rank=rank, world_size=2)
            assert [len(x) for x, _ in ds] == [1] and len(ds) == 1
        print("ok")
    """)
    r = run_py(code, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "gets no batch of an epoch" in r.stderr


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("shares", ["pad", "drop", "uneven"])
def test_len_and_equal_steps(datasets, world, shares):
    # 200 samples, batch 16: len() is what each rank's pass yields; with pad
    # (the default) and drop every rank yields the same number of batches,
    # pad covering every sample (fewer than world repeats), drop leaving
    # fewer than world out; uneven covers each sample exactly once.
    import stoker.torch as st
    counts, seen = [], []
    for rank in range(world):
        kw = {} if shares == "pad" else {"shares": shares}
        ds = st.StokerDataset(datasets["npz"], 16, seed=4, rank=rank, world_size=world,
                              return_indices=True, **kw)
        n = len(ds)
        for epoch in range(2):
            got = [idx.tolist() for _, _, idx in ds]
            assert len(got) == n, (rank, epoch)
            if epoch == 0:
                seen += [i for b in got for i in b]
        counts.append(n)
    if shares != "uneven":
        assert len(set(counts)) == 1, counts
    if shares == "pad":
        assert set(seen) == set(range(200)) and len(seen) - 200 < world
    elif shares == "drop":
        assert len(seen) == len(set(seen)) and 200 - len(seen) < world
    else:
        assert sorted(seen) == list(range(200))


def test_len_equal_steps_under_gloo(datasets, tmp_path):
    # Three ranks of 200 samples, batch 16: the same len() on every rank
    # (DDP's all-reduce would hang on a rank that runs out first).
    import stoker
    src = str(tmp_path / "ds")
    stoker.gen(src, 200, format="tfrecord", size=32, classes=3, seed=2)
    port = free_port()
    code = textwrap.dedent(f"""
        import os, torch.distributed as dist, torch.multiprocessing as mp
        import stoker.torch as st

        def work(rank):
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}")
            dist.init_process_group("gloo", rank=rank, world_size=3)
            ds = st.StokerDataset({src!r}, 16, seed=1)
            n = len(ds)
            steps = sum(1 for _ in ds)
            got = [None] * 3
            dist.all_gather_object(got, (n, steps))
            if rank == 0:
                assert len(set(got)) == 1 and got[0][0] == got[0][1], got
                print("ok", got[0])
            dist.destroy_process_group()

        if __name__ == "__main__":
            mp.spawn(work, nprocs=3)
    """)
    script = tmp_path / "gloo3.py"
    script.write_text(code)
    import subprocess
    import sys
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok (5, 5)" in r.stdout, r.stdout + r.stderr
