"""Mid-epoch resume: a run saved after k batches and resumed covers every
sample exactly once, in the same order as the uninterrupted run; a run
saved at world size 2 and resumed at 3 covers the rest of the epoch
exactly once; stoker.torch's state_dict()/load_state_dict() do the same."""
import numpy as np
import pytest

import stoker
from conftest import needs_torch


def indices(ld, limit=None):
    out = []
    for b in ld:
        out.append(np.asarray(b.indices).tolist())
        if limit is not None and len(out) == limit:
            break
    return out


@pytest.mark.parametrize("shuffle", ["global", "block", "none"])
@pytest.mark.parametrize("k", [1, 4, 11])
def test_resume_same_order(datasets, shuffle, k):
    src = datasets["tfrecord"]
    opts = dict(shuffle=shuffle, seed=42, epochs=2, window=64)
    with stoker.Loader(src, 16, **opts) as ld:
        full = indices(ld)
    with stoker.Loader(src, 16, **opts) as ld:
        head = indices(ld, k)
        state = ld.state()
    with stoker.Loader(src, 16, resume=state, **opts) as ld:
        tail = indices(ld)
    assert head + tail == full
    flat = sum(full, [])
    assert sorted(flat) == sorted(list(range(200)) * 2)  # each sample once per epoch


def test_resume_bad_state(datasets):
    with pytest.raises(stoker.InvalidArgumentError, match="resume"):
        stoker.Loader(datasets["tfrecord"], 16, seed=1, resume={"seed": 2, "epoch": 0, "position": 0})
    with pytest.raises(ValueError, match="resume"):
        stoker.Loader(datasets["tfrecord"], 16, resume={"seed": 2})


def test_resume_refuses_another_dataset(datasets, tmp_path):
    """A state names its dataset (format, shard names, sizes, counts): the
    same files by another path resume; another dataset of as many samples
    is refused; a state without "dataset" (older) is not checked."""
    src = datasets["tfrecord"]
    with stoker.Loader(src, 16, seed=3) as ld:
        indices(ld, 2)
        state = ld.state()
    assert state["dataset"] != 0
    other = str(tmp_path / "other")
    stoker.gen(other, 200, format="tfrecord", size=2000, seed=9)
    with pytest.raises(stoker.InvalidArgumentError, match="resume"):
        stoker.Loader(other, 16, seed=3, resume=state)
    with stoker.Loader(src + "/", 16, seed=3, resume=state) as ld:
        assert sum(len(b) for b in ld) == 200 - 32
    old = {k: state[k] for k in ("seed", "epoch", "position")}
    with stoker.Loader(other, 16, seed=3, resume=old) as ld:
        assert sum(len(b) for b in ld) == 200 - 32


@pytest.mark.parametrize("k", [1, 3])
def test_resume_world_2_to_3(datasets, k):
    src = datasets["mds"]
    opts = dict(shuffle="global", seed=7, drop_last=False)
    seen, states = [], []
    for rank in range(2):
        with stoker.Loader(src, 10, rank=rank, world=2, **opts) as ld:
            for batch in indices(ld, k):
                seen += batch
            states.append(ld.state())
    assert states[0] == states[1]  # every rank agrees where the epoch stands
    assert states[0]["position"] == 2 * 10 * k
    for rank in range(3):
        with stoker.Loader(src, 10, rank=rank, world=3, resume=states[0], **opts) as ld:
            for batch in indices(ld):
                seen += batch
    assert sorted(seen) == list(range(200))  # every sample exactly once


@needs_torch
def test_torch_state_dict_resume(datasets):
    import stoker.torch as st
    src = datasets["wds"]
    ds = st.StokerDataset(src, 16, shuffle=True, seed=3, return_indices=True, rank=0, world_size=1)
    full = [idx.tolist() for _, _, idx in ds]
    assert ds.state_dict() == {"seed": 3, "epoch": 1, "position": 0}
    ds.set_epoch(0)
    it = iter(ds)
    head = [next(it)[2].tolist() for _ in range(5)]
    state = ds.state_dict()
    assert state["epoch"] == 0 and state["position"] == 80
    del it
    ds2 = st.StokerDataset(src, 16, shuffle=True, seed=3, return_indices=True, rank=0, world_size=1)
    ds2.load_state_dict(state)
    tail = [idx.tolist() for _, _, idx in ds2]
    assert head + tail == full
    with pytest.raises(ValueError, match="seed"):
        st.StokerDataset(src, 16, seed=4).load_state_dict(state)


@needs_torch
def test_torch_state_dict_world_change(datasets):
    import stoker.torch as st
    src = datasets["tfrecord"]
    seen, state = [], None
    for rank in range(2):
        ds = st.StokerDataset(src, 8, seed=9, rank=rank, world_size=2, return_indices=True,
                              shares="uneven")
        it = iter(ds)
        for _ in range(3):
            seen += next(it)[2].tolist()
        state = ds.state_dict()
        del it
    for rank in range(3):
        ds = st.StokerDataset(src, 8, seed=9, rank=rank, world_size=3, return_indices=True,
                              shares="uneven")
        ds.load_state_dict(state)
        for _, _, idx in ds:
            seen += idx.tolist()
    assert sorted(seen) == list(range(200))


@needs_torch
def test_torch_epochs_differ_and_cover(datasets):
    import stoker.torch as st
    ds = st.loader(datasets["tfrecord"], 50, seed=1, return_indices=True, rank=0, world_size=1)
    e0 = [i.tolist() for _, _, i in ds]
    e1 = [i.tolist() for _, _, i in ds]
    assert sorted(sum(e0, [])) == sorted(sum(e1, [])) == list(range(200))
    assert e0 != e1  # a new shuffle each epoch


@needs_torch
def test_torch_one_loader_across_epochs(datasets):
    """Passes share one loader (no re-open at each epoch); the order of
    each epoch is the same as a fresh open at that epoch gives."""
    import stoker.torch as st
    src = datasets["tfrecord"]
    ds = st.StokerDataset(src, 32, seed=8, return_indices=True, rank=0, world_size=1)
    e0 = [i.tolist() for _, _, i in ds]
    first = ds._ld
    e1 = [i.tolist() for _, _, i in ds]
    assert ds._ld is first and not first.closed  # the same loader served both
    e2 = [i.tolist() for _, _, i in ds]
    for e, got in enumerate((e0, e1, e2)):
        fresh = st.StokerDataset(src, 32, seed=8, return_indices=True, rank=0, world_size=1, epoch=e)
        assert [i.tolist() for _, _, i in fresh] == got
        fresh.close()
    ds.set_epoch(1)  # back to epoch 1: a new loader, the same order
    assert [i.tolist() for _, _, i in ds] == e1
    ds.close()
    assert ds._ld is None


def test_loader_inherited_through_fork_is_refused(datasets):
    import os
    ld = stoker.Loader(datasets["tfrecord"], 8)
    b = next(ld)
    pid = os.fork()
    if pid == 0:  # the child: the parent's pipeline threads are not here
        code = 1
        try:
            next(ld)
        except RuntimeError as e:
            code = 0 if "another process" in str(e) else 2
        try:
            del b
            ld.close()
            del ld
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert len(b) == 8 and sum(len(x) for x in ld) == 192  # the parent's loader is intact
    ld.close()


@needs_torch
def test_torch_break_continues_the_epoch(datasets):
    # A pass left early (break) is continued by the next pass from the
    # batch after the last one handed out; the two make one whole epoch,
    # and the pass after that is the next epoch.
    import stoker.torch as st
    src = datasets["tfrecord"]
    full = [i.tolist() for _, _, i in st.StokerDataset(src, 16, seed=6, return_indices=True,
                                                       rank=0, world_size=1)]
    ds = st.StokerDataset(src, 16, seed=6, return_indices=True, rank=0, world_size=1)
    head = []
    for k, (_, _, idx) in enumerate(ds):
        head.append(idx.tolist())
        if k == 2:
            break
    assert ds.state_dict()["position"] == 48 and ds.state_dict()["epoch"] == 0
    tail = [i.tolist() for _, _, i in ds]
    assert head + tail == full
    nxt = [i.tolist() for _, _, i in ds]
    fresh = st.StokerDataset(src, 16, seed=6, return_indices=True, rank=0, world_size=1, epoch=1)
    assert nxt == [i.tolist() for _, _, i in fresh]


@needs_torch
def test_torch_two_iterators_at_once(datasets):
    # Two passes over one dataset at the same time each get the whole epoch
    # (they shared one loader and split its batches between them).
    import stoker.torch as st
    ds = st.StokerDataset(datasets["npz"], 20, seed=2, return_indices=True, rank=0, world_size=1)
    a, b = iter(ds), iter(ds)
    got_a, got_b = [], []
    for (_, _, ia), (_, _, ib) in zip(a, b):
        got_a += ia.tolist()
        got_b += ib.tolist()
    got_a += [i for _, _, x in a for i in x.tolist()]
    got_b += [i for _, _, x in b for i in x.tolist()]
    assert sorted(got_a) == list(range(200)) and sorted(got_b) == list(range(200))
    assert got_a == got_b  # the same epoch, the same order


@needs_torch
def test_torch_large_epochs_and_strict_states(datasets):
    # An epoch at or past 2^31 still has its samples (it gave an empty
    # pass); states and epochs that are not whole numbers are refused with
    # their key named, not truncated.
    import stoker.torch as st
    src = datasets["tfrecord"]
    for e in (2 ** 31, 2 ** 32 - 2):
        ds = st.StokerDataset(src, 50, seed=1, rank=0, world_size=1, epoch=e)
        assert sum(len(x) for x, _ in ds) == 200, e
        ds.set_epoch(e)
        assert sum(len(x) for x, _ in ds) == 200, e
    ds = st.StokerDataset(src, 50, seed=1, rank=0, world_size=1)
    with pytest.raises(ValueError, match="epoch"):
        ds.set_epoch(2 ** 32 - 1)
    with pytest.raises(TypeError, match="position"):
        ds.load_state_dict({"seed": 1, "epoch": 0, "position": 1.5})
    with pytest.raises(TypeError, match="epoch"):
        ds.load_state_dict({"seed": 1, "epoch": "3", "position": 0})
    with pytest.raises(ValueError, match="position"):
        ds.load_state_dict({"seed": 1, "epoch": 0, "position": -1})
    import numpy as np
    import torch
    ds.load_state_dict({"seed": np.int64(1), "epoch": torch.tensor(0), "position": 50})
    assert sum(len(x) for x, _ in ds) == 150
    for kw, exc in ((dict(rank=2, world_size=2), ValueError), (dict(rank=1.0, world_size=2), TypeError),
                    (dict(world_size=0), ValueError), (dict(epoch=-1), ValueError)):
        with pytest.raises(exc):
            st.StokerDataset(src, 50, **kw)
