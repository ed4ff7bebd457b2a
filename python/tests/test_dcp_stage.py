"""CheckpointWriter as DCP's stager under dcp.async_save: the state is
copied into host buffers the writer keeps, reused by the next save once the
save that wrote them has returned, never while it may still be read."""
import pytest

from conftest import needs_torch

pytestmark = needs_torch


def test_writer_is_dcps_stager_and_reuses_its_buffers(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.staging import AsyncStager

    import stoker.torch as st
    w = st.CheckpointWriter(tmp_path / "c")
    assert isinstance(w, AsyncStager) and not w.should_synchronize_after_execute
    staged = []
    stage = w.stage
    w.stage = lambda sd: staged.append(stage(sd)) or staged[-1]
    x = torch.arange(1 << 16, dtype=torch.float32)
    sd = {"x": x, "meta": {"tag": "run"}}
    for step in (1, 2):
        dcp.async_save(sd, storage_writer=w, checkpoint_id=step, no_dist=True).result()
        x.mul_(3)  # training goes on, in place
    assert len(staged) == 2
    # the second save copied into the first's buffers: its save had returned
    assert staged[0]["x"].data_ptr() == staged[1]["x"].data_ptr()
    assert staged[1]["x"].data_ptr() != x.data_ptr()
    # two stagings with no save ended between: the second gets its own
    # buffers, the first keeps the state it copied
    a = w.stage(sd)
    x.add_(1)
    b = w.stage(sd)
    assert a["x"].data_ptr() != b["x"].data_ptr()
    assert torch.equal(a["x"], x - 1) and torch.equal(b["x"], x)
    w.close()
    base = torch.arange(1 << 16, dtype=torch.float32)
    for step, want in ((1, base), (2, base * 3)):
        out = {"x": torch.zeros(1 << 16), "meta": {"tag": ""}}
        dcp.load(out, storage_reader=st.CheckpointReader(tmp_path / "c"), checkpoint_id=step,
                 no_dist=True)
        assert torch.equal(out["x"], want), step
        assert out["meta"]["tag"] == "run"


def test_a_failed_save_frees_its_buffers(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp

    import stoker.torch as st
    w = st.CheckpointWriter(tmp_path / "c")
    sd = {"x": torch.ones(1024)}
    dcp.save(sd, storage_writer=w, checkpoint_id=1)
    first = w.stage(sd)
    w._staged_done()                       # that staging's save returned
    with pytest.raises(BaseException):     # the step exists: refused in finish()
        dcp.async_save(sd, storage_writer=w, checkpoint_id=1, no_dist=True).result()
    again = w.stage(sd)                    # the failed save gave its set back
    assert again["x"].data_ptr() == first["x"].data_ptr()
    w.close()


def test_a_failed_staging_leaves_a_busy_set_alone(tmp_path):
    import torch

    import stoker.torch as st

    class Uncopyable:
        def __deepcopy__(self, memo):
            raise RuntimeError("cannot be copied")

    w = st.CheckpointWriter(tmp_path / "c")
    sd = {"x": torch.ones(1024)}
    busy = w.stage(sd)                     # its save has not returned yet
    with pytest.raises(RuntimeError, match="cannot be copied"):
        w.stage({"x": torch.ones(1024), "y": Uncopyable()})
    other = w.stage(sd)                    # never the set a save still reads
    assert other["x"].data_ptr() != busy["x"].data_ptr()
    assert busy["x"].eq(1).all()
    w.close()


def test_a_gpu_state_is_staged_into_pinned_buffers(tmp_path):
    """On a GPU: stage() copies a CUDA state into pinned host buffers that it
    reuses, and what it staged survives the training step that follows."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False): stages a GPU "
                    "state into pinned host buffers (scripts/gpu-checks runs it)")
    import torch.distributed.checkpoint as dcp

    import stoker.torch as st
    n = 1 << 21                                          # 16 MiB of int64 (exact)
    w = st.CheckpointWriter(tmp_path / "c")
    x = torch.arange(n, dtype=torch.int64, device="cuda")
    sd = {"x": x, "meta": {"tag": "gpu"}}
    staged = []
    stage = w.stage
    w.stage = lambda s: staged.append(stage(s)) or staged[-1]
    for step in (1, 2, 3):
        dcp.async_save(sd, storage_writer=w, checkpoint_id=step, no_dist=True).result()
        x.mul_(2)                                        # the next step, on the GPU
    assert len(staged) == 3
    for s in staged:
        assert s["x"].device.type == "cpu" and s["x"].is_pinned()
    assert staged[0]["x"].data_ptr() == staged[1]["x"].data_ptr()   # kept, not made again
    busy = w.stage(sd)                                   # its save has not returned
    x.add_(1)
    torch.cuda.synchronize()
    assert torch.equal(busy["x"], (x - 1).cpu())
    w.close()
    base = torch.arange(n, dtype=torch.int64)
    for step, k in ((1, 1), (2, 2), (3, 4)):
        out = {"x": torch.zeros(n, dtype=torch.int64, device="cuda"), "meta": {"tag": ""}}
        dcp.load(out, storage_reader=st.CheckpointReader(tmp_path / "c"), checkpoint_id=step,
                 no_dist=True)
        assert torch.equal(out["x"].cpu(), base * k), step
        assert out["meta"]["tag"] == "gpu"
