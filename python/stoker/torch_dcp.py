"""torch.distributed.checkpoint (DCP) storage on stoker's checkpoint tier.

    import torch.distributed.checkpoint as dcp
    import stoker.torch as st

    writer = st.CheckpointWriter("/nvme/ckpt", origin="s3://bucket/run-17")
    dcp.save(state_dict, storage_writer=writer, checkpoint_id=step)
    fut = dcp.async_save(state_dict, storage_writer=writer, checkpoint_id=step)
    ...
    dcp.load(state_dict, storage_reader=st.CheckpointReader("/nvme/ckpt",
             origin="s3://bucket/run-17"))          # the newest complete step

Each rank saves its share of the plan as one checkpoint of the tier (one
directory per step and rank, written in parallel large aligned writes,
CRC32C per object, committed by its manifest, then drained to the origin in
the background). Every write item is one object; tensors are stored as
their raw bytes (no pickling), byte items as they are. Rank 0 (DCP's
coordinator) saves its share last, in finish(), together with DCP's global
metadata as the object ".metadata": its manifest is the commit point of the
whole step, written only once every rank has committed its own. A reader
takes rank 0's newest complete step (or the step it is given), reads the
metadata from it, and loads the share of each rank its plan needs: from the
local copy when intact, else re-staged from the origin (a node that lost its
disk), every object's CRC checked.

checkpoint_id is the step: a whole number (dcp.save(..., checkpoint_id=100)).
Without one the writer takes one past the newest step any rank has (agreed
in DCP's global plan) and the reader the newest step rank 0 committed.

DCP's own FileSystemReader cannot read these checkpoints, drained or not:
the tier names its files by index (00000.obj, the names are in
MANIFEST.json), so no ".metadata" file exists; each rank's share is its own
directory; and tensors are raw bytes, where FileSystemReader torch.load()s
each one. Read them with CheckpointReader, from the local directory or the
origin.
"""
import dataclasses
import io
import operator
import pickle
import threading

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from stoker import _stoker

try:  # torch >= 2.8: DCP's staging engine, which can keep its host buffers
    from torch.distributed.checkpoint._state_dict_stager import StateDictStager as _Stager
except ImportError:  # older torch: stage() stages as DCP's default does
    _Stager = None

__all__ = ["CheckpointWriter", "CheckpointReader"]

_METADATA = ".metadata"
_NAME_MAX = 255


def _step_of(checkpoint_id):
    """checkpoint_id as a step (a whole number, or its decimal text)."""
    if checkpoint_id is None:
        return None
    if isinstance(checkpoint_id, bool):
        raise TypeError("checkpoint_id: expected a step (a whole number), got bool")
    if isinstance(checkpoint_id, str) and checkpoint_id.isdigit():
        return int(checkpoint_id)
    try:
        step = operator.index(checkpoint_id)
    except TypeError:
        raise TypeError(f"checkpoint_id: expected a step (a whole number), got "
                        f"{type(checkpoint_id).__name__} {checkpoint_id!r}") from None
    if not 0 <= step < (1 << 64) - 1:
        raise ValueError(f"checkpoint_id: step {step} is out of range (0..2^64-2)")
    return step


def _rank_world(rank=None):
    import torch.distributed as dist
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if rank is None:
        rank = dist.get_rank() if world > 1 else 0
    return rank, max(world, rank + 1)


def _object_name(i, item):
    """A distinct object name: the item's position, then its FQN (cut to fit)."""
    name = f"{i:06d} {item.index.fqn}"
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > _NAME_MAX:
        name = raw[:_NAME_MAX].decode("utf-8", "ignore")
    return name


def _tensor_bytes(t):
    """A CPU tensor's bytes as a contiguous uint8 array (no copy when it is
    already contiguous on the CPU)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy()


class CheckpointWriter(StorageWriter):
    """A DCP StorageWriter that saves into stoker's checkpoint tier.

    local_dir: the node-local checkpoint directory; origin: where complete
    checkpoints are drained (a path, http(s):// taking PUT, s3://bucket/prefix;
    None = none). threads, direct, fsync, keep_last, max_bytes: as
    stk_ckpt_opts (docs/ckpt.md). keep_last should be 2 or more under several
    ranks: a step is whole only when rank 0 committed it. The handle stays
    open across saves (drains run behind training); close() waits for them.

    Under dcp.async_save the writer is also DCP's stager (stage()): the
    state is copied into host buffers the writer keeps from one save to the
    next (pinned where CUDA is available), so a save after the first blocks
    for one copy into memory already mapped, where DCP's default stager
    allocates and faults in a new copy of the whole state each time. A
    buffer is reused only once the save that wrote it has returned; while
    one is still being written the next save stages into a second set."""

    _synchronize_after_execute = False   # stage() returns the staged copy

    def __init__(self, local_dir, origin=None, *, threads=0, direct=True, fsync=True,
                 keep_last=0, max_bytes=0):
        super().__init__()
        self.local_dir = str(local_dir)
        self.origin = None if origin is None else str(origin)
        self._opts = dict(threads=threads, direct=bool(direct), fsync=bool(fsync),
                          keep_last=keep_last, max_bytes=max_bytes)
        self._ckpt = None
        self._rank_world = None
        self._step = None       # given by checkpoint_id, else chosen per save
        self._coordinator = False
        self._pending = None    # the coordinator's share, saved in finish()
        self._stage_lock = threading.Lock()
        self._stagers_free = []   # host buffer sets no save is reading
        self._stagers_busy = []   # staged, oldest first, save not yet returned

    # -- the tier's handle --------------------------------------------------
    def _handle(self, rank, world):
        if self._ckpt is None or self._rank_world != (rank, world):
            self.close()
            self._ckpt = _stoker.Checkpoint(self.local_dir, rank, world, self.origin,
                                            **self._opts)
            self._rank_world = (rank, world)
        return self._ckpt

    def close(self):
        """Wait for queued drains and free the handle (a later save reopens it)."""
        if self._ckpt is not None:
            c, self._ckpt = self._ckpt, None
            c.close()

    def drain_wait(self):
        """Block until every queued drain is at the origin; raise the first error."""
        if self._ckpt is not None:
            self._ckpt.drain_wait()

    def stats(self):
        """The tier's counters for this rank (saves, bytes, drains, ...)."""
        return self._ckpt.stats() if self._ckpt is not None else {}

    # -- AsyncStager (dcp.async_save) ---------------------------------------
    def stage(self, state_dict):
        """A copy of state_dict in host memory that training may not change:
        DCP calls it from dcp.async_save before the save runs behind."""
        if _Stager is None:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
            stager = DefaultStager(StagingOptions(False, False, False, False))
            try:
                return stager.stage(state_dict)
            finally:
                stager.close()
        with self._stage_lock:
            if self._stagers_free:
                stager = self._stagers_free.pop()
            else:
                stager = _Stager(pin_memory=torch.cuda.is_available())
            # A set still busy after two newer ones (its save died before
            # write_data) is forgotten here, never reused: the memory goes
            # when DCP drops that save's state.
            self._stagers_busy = self._stagers_busy[-1:] + [stager]
        try:
            return stager.stage(state_dict)
        except BaseException:  # no save will read this set: it is free again
            with self._stage_lock:
                if stager in self._stagers_busy:
                    self._stagers_busy.remove(stager)
                    self._stagers_free.append(stager)
            raise

    @property
    def should_synchronize_after_execute(self):
        return False

    def synchronize_staging(self):
        """Nothing to wait for: stage() returns once the copy is made."""

    def _staged_done(self):
        """A save ended (or failed) on this writer: saves on one writer run one
        at a time in staging order, so the oldest busy set is no longer read."""
        with self._stage_lock:
            if self._stagers_busy:
                self._stagers_free.append(self._stagers_busy.pop(0))
                del self._stagers_free[:-2]

    # -- StorageWriter --------------------------------------------------------
    def reset(self, checkpoint_id=None):
        self._step = _step_of(checkpoint_id)
        self._pending = None

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        rank, world = _rank_world(kwargs.get("rank"))
        self._coordinator = bool(is_coordinator)
        self._handle(rank, world)

    def prepare_local_plan(self, plan):
        step = self._step
        if step is None:
            latest = self._ckpt.latest()
            step = 1 if latest is None else latest + 1
        return dataclasses.replace(plan, storage_data=step)

    def prepare_global_plan(self, plans):
        step = max(p.storage_data for p in plans)
        return [dataclasses.replace(p, storage_data=step) for p in plans]

    def write_data(self, plan, planner):
        try:
            return self._write_data(plan, planner)
        except BaseException:
            self._staged_done()
            raise

    def _write_data(self, plan, planner):
        step = plan.storage_data
        rank = self._rank_world[0]
        objs, results = [], []
        for i, item in enumerate(plan.items):
            data = planner.resolve_data(item)
            name = _object_name(i, item)
            if item.type == WriteItemType.BYTE_IO:
                buf = data.getbuffer()
                info = ("stoker", rank, name, None, None)
            else:
                buf = _tensor_bytes(data)
                info = ("stoker", rank, name, data.dtype, tuple(data.shape))
            objs.append((name, buf))
            results.append(WriteResult(index=item.index, size_in_bytes=len(memoryview(buf)),
                                       storage_data=info))
        if self._coordinator:
            self._pending = (step, objs)   # saved with the metadata, last
        else:
            self._ckpt.save(step, objs)
            self._staged_done()
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        metadata.storage_data = {r.index: r.storage_data for rs in results for r in rs}
        if self._pending is None:
            raise RuntimeError("CheckpointWriter.finish: this rank wrote no data "
                               "(finish runs on the coordinator after write_data)")
        step, objs = self._pending
        self._pending = None
        try:
            objs.append((_METADATA, pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL)))
            self._ckpt.save(step, objs)
        finally:
            self._staged_done()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False  # never picked by DCP on its own: pass storage_writer=


class CheckpointReader(StorageReader):
    """A DCP StorageReader of checkpoints saved by CheckpointWriter: from
    local_dir when the copy there is complete and intact, else re-staged
    from origin. Each rank loads whole the shares its plan reads from (and
    rank 0's, for the metadata), one at a time, then frees them. With
    no_stage=True a share the local copy cannot serve is read from the
    origin straight into memory, and nothing is written to local_dir."""

    def __init__(self, local_dir, origin=None, *, threads=0, direct=True, no_stage=False):
        super().__init__()
        self.local_dir = str(local_dir)
        self.origin = None if origin is None else str(origin)
        self._opts = dict(threads=threads, direct=bool(direct), no_stage=bool(no_stage))
        self._step = None
        self._loaded = {}
        self.storage_data = None

    def _load(self, rank):
        d = self._loaded.get(rank)
        if d is None:
            c = _stoker.Checkpoint(self.local_dir, rank, rank + 1, self.origin, **self._opts)
            try:
                d = c.load(self._step)
            finally:
                c.close()
            self._loaded[rank] = d
        return d

    def reset(self, checkpoint_id=None):
        self._step = _step_of(checkpoint_id)
        self._loaded = {}

    def read_metadata(self):
        d = self._load(0)
        self._step = d.step
        return pickle.loads(d.view(_METADATA))

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        by_rank = {}
        for req in plan.items:
            by_rank.setdefault(self.storage_data[req.storage_index][1], []).append(req)
        for rank in sorted(by_rank):
            d = self._load(rank)
            for req in by_rank[rank]:
                _, _, name, dtype, shape = self.storage_data[req.storage_index]
                mv = d.view(name)
                if req.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(req, io.BytesIO(mv))
                    continue
                if len(mv):
                    t = torch.frombuffer(mv, dtype=dtype).reshape(shape)
                else:
                    t = torch.empty(shape, dtype=dtype)
                t = narrow_tensor_by_index(t, req.storage_offsets, req.lengths)
                target = planner.resolve_tensor(req).detach()
                if target.size() != t.size():
                    raise RuntimeError(f"checkpoint step {self._step}: {req.storage_index.fqn} "
                                       f"has shape {tuple(t.size())}, the state dict "
                                       f"{tuple(target.size())}")
                target.copy_(t)
                planner.commit_tensor(req, target)
            if rank != 0:
                self._loaded.pop(rank, None)
        self._loaded = {}
        fut = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False  # never picked by DCP on its own: pass storage_reader=
