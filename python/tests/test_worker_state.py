"""state_dict() / load_state_dict() with DataLoader workers: the main
process refuses to give a position it cannot see (it used to return the
initial state without a word), and each worker's own state resumes that
worker exactly, as torchdata's StatefulDataLoader uses it (saved in each
worker after each batch, loaded back into the same worker)."""
import pytest
from conftest import needs_torch

pytestmark = needs_torch


def test_main_process_refuses_state_after_worker_passes(datasets):
    import torch

    import stoker.torch as st
    ds = st.StokerDataset(datasets["npz"], 16, seed=3, world_size=1, rank=0)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    it = iter(dl)
    for _ in range(4):
        next(it)
    with pytest.raises(RuntimeError, match="DataLoader worker processes.*StatefulDataLoader"):
        ds.state_dict()
    del it


class _Stateful(__import__("torch").utils.data.IterableDataset):
    """What StatefulDataLoader does in each worker: the dataset's
    state_dict() after each item, sent with it; load_state_dict() of the
    saved one before the worker's pass."""

    def __init__(self, inner, states=None):
        self.inner, self.states = inner, states or {}

    def __iter__(self):
        import torch
        wid = torch.utils.data.get_worker_info().id
        if wid in self.states:
            self.inner.load_state_dict(self.states[wid])
        for x, y, idx in self.inner:
            yield idx, wid, self.inner.state_dict()


def test_each_worker_resumes_its_own_share(datasets):
    import torch

    import stoker.torch as st

    def make(states=None):
        ds = st.StokerDataset(datasets["npz"], 8, seed=9, world_size=1, rank=0,
                              return_indices=True)
        return torch.utils.data.DataLoader(_Stateful(ds, states), batch_size=None,
                                           num_workers=2)

    seen, saved = [], {}
    it = iter(make())
    for _ in range(7):  # stop mid-epoch, the workers a batch apart
        idx, wid, state = next(it)
        seen += idx.tolist()
        saved[wid] = state
    del it
    assert set(saved) == {0, 1} and all(s["num_workers"] == 2 for s in saved.values())
    rest = [i for idx, _, _ in make(saved) for i in idx.tolist()]
    assert len(seen) + len(rest) == 200
    assert sorted(seen + rest) == list(range(200))  # nothing lost, nothing twice

    # A worker's state does not resume another share.
    ds = st.StokerDataset(datasets["npz"], 8, seed=9, world_size=1, rank=0)
    with pytest.raises(ValueError, match="saved in DataLoader worker 0 of 2, loaded in the main"):
        ds.load_state_dict(saved[0])


def test_workers_advance_the_epoch(datasets):
    # Workers are forked afresh from this process every epoch: each epoch
    # used to start from epoch 0's order again.
    import torch

    import stoker.torch as st
    ds = st.StokerDataset(datasets["npz"], 10, seed=7, world_size=1, rank=0, return_indices=True)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)

    def epoch():  # batches in order: DataLoader takes them from workers 0, 1, 0, 1, ...
        return [idx.tolist() for _, _, idx in dl]

    epochs = [epoch() for _ in range(3)]
    for b in epochs:
        assert sorted(i for x in b for i in x) == list(range(200))
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and epochs[0] != epochs[2]
    for e in range(3):
        # Worker w read rank w of 2 in epoch e, as a dataset without workers does.
        for w in range(2):
            ref = st.StokerDataset(datasets["npz"], 10, seed=7, world_size=2, rank=w,
                                   epoch=e, return_indices=True)
            assert [idx.tolist() for _, _, idx in ref] == epochs[e][w::2]
        ds.set_epoch(e)  # set_epoch reaches the workers
        assert epoch() == epochs[e]


def test_torchdata_stateful_dataloader_resumes_under_workers(datasets):
    # The real protocol, not the stand-in above: torchdata's
    # StatefulDataLoader calls state_dict() in each worker as it hands out
    # batches, and load_state_dict() in each worker of a new loader given the
    # main process's dl.state_dict(). The resumed loader must give the rest
    # of the epoch: the same batches, in the same order, as the first loader
    # gives after the save, so nothing is lost or seen twice.
    tdl = pytest.importorskip("torchdata.stateful_dataloader")

    import stoker.torch as st

    def make():
        ds = st.StokerDataset(datasets["npz"], 8, seed=11, world_size=1, rank=0,
                              return_indices=True)
        return tdl.StatefulDataLoader(ds, batch_size=None, num_workers=2)

    dl = make()
    it = iter(dl)
    seen = [next(it)[2].tolist() for _ in range(7)]  # mid-epoch, the workers a batch apart
    sd = dl.state_dict()
    # Each worker's own state, from stoker's state_dict() in that worker
    # (not torchdata's fallback of replaying the batches).
    snaps = sd["_snapshot"]["_worker_snapshots"]
    assert {w: (s["dataset_state"]["worker_id"], s["dataset_state"]["num_workers"])
            for w, s in snaps.items()} == {"worker_0": (0, 2), "worker_1": (1, 2)}
    after = [b[2].tolist() for b in it]
    del it
    assert sorted(i for b in seen + after for i in b) == list(range(200))

    dl2 = make()
    dl2.load_state_dict(sd)
    resumed = [b[2].tolist() for b in dl2]
    assert resumed == after
