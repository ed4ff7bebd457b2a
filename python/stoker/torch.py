"""stoker.torch: stoker's loader as a PyTorch IterableDataset.

    import stoker.torch
    data = stoker.torch.loader("data/train", batch_size=256, decode="jpeg",
                               layout="chw", dtype="f32", shuffle=True, seed=1)
    for epoch in range(90):
        for x, y in data:                  # x: (256, 3, 224, 224) float32, y: int64
            loss = F.cross_entropy(model(x), y)
            ...
        torch.save(data.state_dict(), "ckpt.pt")   # any time: mid-epoch too

The dataset yields whole batches (stoker batches them in C), so inside a
torch DataLoader use batch_size=None. Rank and world size come from
torch.distributed when it is initialized, else from RANK / WORLD_SIZE, else
0 of 1; inside DataLoader workers each worker reads a disjoint share
(rank * num_workers + worker id of world * num_workers). stoker already
runs its own threads, so num_workers=0 is the recommended setting. With
workers the main process cannot see their positions (its state_dict()
raises); each worker's own state_dict() / load_state_dict() resume its
share, as torchdata's StatefulDataLoader uses them.
"""
import multiprocessing
import multiprocessing.context
import operator
import os

import torch
from torch.utils.data import IterableDataset, get_worker_info

import stoker
from stoker import fields

__all__ = ["StokerDataset", "loader", "dist_rank_world", "CheckpointWriter", "CheckpointReader"]

# The loader counts epochs in 32 bits: a pass may start at any epoch below
# this, and the loader kept between passes runs up to 2^31 epochs past it.
_EPOCH_LIMIT = (1 << 32) - 1


def _whole(name, v, lo=0, hi=(1 << 64) - 1):
    """v as an int in [lo, hi], or a one-line error naming it: floats,
    strings and bools are refused, not truncated (numpy and 0-d tensor
    integers are accepted)."""
    if isinstance(v, bool):
        raise TypeError(f"{name}: expected a whole number, got bool")
    try:
        x = operator.index(v)
    except TypeError:
        raise TypeError(f"{name}: expected a whole number, got {type(v).__name__}") from None
    if not lo <= x <= hi:
        raise ValueError(f"{name}: {x} is out of range ({lo}..{hi})")
    return x


def dist_rank_world():
    """(rank, world size): torch.distributed when initialized, else the
    RANK / WORLD_SIZE environment variables (torchrun sets them), else (0, 1)."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    try:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError("RANK and WORLD_SIZE must be integers") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return rank, world


class StokerDataset(IterableDataset):
    """StokerDataset(source, batch_size=64, *, rank=None, world_size=None, **options)

    An IterableDataset of (inputs, labels) batches read by stoker.Loader
    (every Loader option is accepted: decode, size, dtype, layout, shuffle,
    seed, drop_last, cache_dir, pin_memory, ...; seq_len= and the token
    options make it a dataset of GPT token windows: each item is then a dict
    {"tokens", "labels", "loss_mask"[, "cu_seqlens", "position_ids"]}).
    shares defaults to "pad"
    here: every rank gets the same number of batches (len()), the last round
    of an epoch that the world does not divide wrapping to its first
    samples, as DistributedSampler does; shares="drop" leaves them out.

    inputs: for decode="jpeg" a (batch, 3, H, W) or (batch, H, W, 3) tensor,
      uint8 or normalized float32 as dtype says, sharing the loader's memory;
      for other decodes a (batch, record_bytes) uint8 tensor when records
      have equal sizes, else a list of 1-D uint8 tensors. labels: int64.
    Each pass (iter) is one epoch; the epoch advances by itself after a
    full pass, or set_epoch(e) picks it (as with DistributedSampler).
    return_indices=True yields (inputs, labels, global sample numbers).
    state_dict() / load_state_dict() resume mid-epoch with exactly the
    remaining samples, also under another world size.

    decode="fields" makes each item a dict of the samples' fields
    (WebDataset keys, TFRecord features, MDS columns, npz arrays, a class
    folder's file with its "cls"), each decoded by decoders={field: name or
    callable} or by its extension (stoker.fields): images to (3, H, W)
    uint8 tensors, .npy members and typed columns to arrays of their own
    dtype and shape, cls to ints; equal shapes are stacked, text, bytes and
    JSON come as lists. JPEG, PNG and WebP fields are decoded by stoker's C
    workers (image_fields="*" by default; "" decodes them in Python as
    before), each at its own size (images of different sizes come as a
    list), or with size= through decode="jpeg"'s transform (train or eval
    crop, dtype, layout) to one size, stacked.

    transform=fn runs the user's own function (torchvision v2 transforms on
    tensors, say) on each decoded sample (transform_on="sample": the dict,
    or one input tensor of a jpeg/raw batch) or on the whole item
    (transform_on="batch"), in a pool of transform_threads threads (0 or 1:
    the iterating thread). Only there is the GIL taken; stoker's own
    decode, crop and flip (decode="jpeg") stay in C and remain the fast
    path.

    device="cuda" (or "cuda:N", a torch.device) hands out tensors on that
    GPU instead: each batch is copied from pinned memory (pin_memory
    defaults to True then) on a CUDA stream of stoker's, one batch ahead
    of the one handed out, and the consumer's current stream waits for its
    copy only. Iterate in the main process (num_workers=0).
    """

    def __init__(self, source, batch_size=64, *, rank=None, world_size=None, epoch=0,
                 return_indices=False, device=None, decoders=None, transform=None,
                 transform_on="sample", transform_threads=0, **options):
        super().__init__()
        self.decoders = fields.check_decoders(decoders)
        if decoders is not None and options.get("decode") != "fields":
            raise ValueError('decoders: only with decode="fields"')
        if options.get("decode") == "fields" and "image_fields" not in options:
            # Image fields decoded by the loader's C workers; "" keeps them
            # as stored for the Python decoders.
            options["image_fields"] = fields.image_fields(self.decoders)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform: expected a callable, got {type(transform).__name__}")
        if transform_on not in ("sample", "batch"):
            raise ValueError(f'transform_on: {transform_on!r} is not "sample" or "batch"')
        if transform is not None and options.get("seq_len"):
            raise ValueError("transform: not with seq_len (token windows)")
        self.transform, self.transform_on = transform, transform_on
        self.transform_threads = _whole("transform_threads", transform_threads, 0, 1024)
        self._pool = None
        self.device = _cuda_device(device)
        if self.device is not None:
            options.setdefault("pin_memory", True)
        for bad in ("epochs", "resume", "world"):
            if bad in options:
                raise TypeError(f"{bad}: not an option of StokerDataset (each pass is one "
                                f"epoch; use load_state_dict() to resume, world_size= for the world)")
        self.source = source
        self.batch_size = batch_size
        self.return_indices = bool(return_indices)
        self.options = dict(options)
        # Every rank the same number of steps, as DistributedSampler gives
        # (a rank that runs out first leaves the others waiting in DDP's
        # all-reduce): the last round wraps; shares="drop" leaves it out.
        self.options.setdefault("shares", "pad")
        self.seed = options.get("seed", 1234 if options.get("seq_len") else 0)
        # Checked here, not at the first pass.
        if world_size is not None:
            world_size = _whole("world_size", world_size, 1, (1 << 32) - 1)
        if rank is not None:
            rank = _whole("rank", rank, 0, (1 << 32) - 2)
            if world_size is not None and rank >= world_size:
                raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self._rank, self._world = rank, world_size
        epoch = _whole("epoch", epoch, 0, _EPOCH_LIMIT - 1)
        self._epoch = epoch
        self._resume = None      # (seed, epoch, position) for the next pass
        self._state = {"seed": self.seed, "epoch": epoch, "position": 0}
        self._loader = None
        self._ld = None
        self._ld_key = None
        self._ld_epoch = None
        self._pending = None
        self._last_stats = None
        # Shared with DataLoader workers: memory that fork inherits and
        # spawn passes along (a RawArray may travel only to a process being
        # started; __getstate__ drops it for any other pickling).
        # [0]: a worker has run a pass (this process's state_dict() cannot
        # see where it is); [1]: the epoch the next pass runs, which a
        # worker's finished pass advances and set_epoch() sets, so that
        # workers, forked afresh from this process each epoch, do not
        # repeat epoch 0's order every time.
        self._shared = multiprocessing.RawArray("q", 2)
        self._shared[1] = epoch
        self._active = False     # a pass (_pass) is in progress
        # Bad options fail here (TypeError/ValueError naming them), not in the first pass.
        stoker._options(source, batch_size, **options)

    # -- sharding --------------------------------------------------------------

    def rank_world(self):
        """(rank, world) this dataset reads as, DataLoader workers included."""
        if self._rank is None or self._world is None:
            r, w = dist_rank_world()
            rank = r if self._rank is None else self._rank
            world = w if self._world is None else self._world
        else:
            rank, world = self._rank, self._world
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in [0, world_size={world})")
        info = get_worker_info()
        if info is not None and info.num_workers > 1:
            rank, world = rank * info.num_workers + info.id, world * info.num_workers
        return rank, world

    def __len__(self):
        """Batches this rank yields per pass (an epoch): the same on every
        rank unless shares="uneven". With DataLoader workers each reads its
        own share of this rank's, so their partial batches may add up to a
        few more. Opens the loader the next pass would open (and uses)."""
        rank, world = self.rank_world()
        if (self._ld is None or self._ld.closed
                or self._ld_key != (rank, world, os.getpid())):
            self._open(rank, world, self._resume or (self.seed, self._epoch, 0))
            self._resume = None
        return self._ld.epoch_batches()

    # -- epochs and resume -----------------------------------------------------

    def set_epoch(self, epoch):
        """Make the next pass epoch `epoch` (from its start)."""
        epoch = _whole("epoch", epoch, 0, _EPOCH_LIMIT - 1)
        self._epoch = epoch
        self._resume = None
        self._state = {"seed": self.seed, "epoch": epoch, "position": 0}
        if getattr(self, "_shared", None) is not None:
            self._shared[1] = epoch

    def state_dict(self):
        """Where the loop stands: {"seed", "epoch", "position"[, "dataset"]}
        (position counts the epoch's samples that all ranks together have
        consumed; dataset is the dataset's fingerprint, which a resume on
        another dataset is refused for).
        Save it with the model; load_state_dict() resumes from it."""
        info = get_worker_info()
        if info is not None:
            # In a worker (torchdata's StatefulDataLoader asks each worker):
            # its own share's state, to be loaded back into the same worker.
            return dict(self._state, worker_id=info.id, num_workers=info.num_workers)
        shared = getattr(self, "_shared", None)
        if shared is not None and shared[0]:
            raise RuntimeError("state_dict(): the dataset was iterated in DataLoader worker "
                               "processes, whose positions this process cannot see; use "
                               "num_workers=0 (stoker runs its own threads), or torchdata's "
                               "StatefulDataLoader, which saves each worker's state_dict()")
        return dict(self._state)

    def load_state_dict(self, state):
        """Continue from a state_dict() at the next pass, with exactly the
        samples that remained (the world size may differ)."""
        if not isinstance(state, dict):
            raise TypeError("state: expected the dict state_dict() returned")
        try:
            seed = _whole("state: seed", state["seed"])
            epoch = _whole("state: epoch", state["epoch"], 0, _EPOCH_LIMIT - 1)
            pos = _whole("state: position", state["position"])
        except KeyError as e:
            raise ValueError(f"state: missing key {e}") from None
        if seed != self.seed:
            raise ValueError(f"state: saved with seed {seed}, this dataset has seed {self.seed}")
        # A worker's state covers its own share only: it resumes that
        # worker of the same number of workers, nothing else.
        info = get_worker_info()
        here = (info.id, info.num_workers) if info is not None else None
        saved = None
        if "num_workers" in state or "worker_id" in state:
            saved = (_whole("state: worker_id", state.get("worker_id")),
                     _whole("state: num_workers", state.get("num_workers"), 1))
        if saved != here and (saved is not None or (here is not None and here[1] > 1)):
            where = lambda w: "the main process" if w is None else \
                f"DataLoader worker {w[0]} of {w[1]}"
            raise ValueError(f"state: saved in {where(saved)}, loaded in {where(here)}: a "
                             f"state resumes the share it was saved from (with workers, "
                             f"StatefulDataLoader gives each worker its own)")
        fp = _whole("state: dataset", state.get("dataset", 0))  # 0: saved before fingerprints
        self._epoch = epoch
        self._resume = (seed, epoch, pos, fp)
        self._state = {"seed": seed, "epoch": epoch, "position": pos, "dataset": fp}

    # -- iteration ---------------------------------------------------------------

    def _inputs(self, batch):
        data = torch.from_dlpack(batch.data)
        if data.dim() > 1:  # fixed-size decode: (n, ...) already
            return data
        n = len(batch)
        if n == 0:
            return data[:0].reshape(0, 0)
        lens = memoryview(batch.lengths).cast("B").cast("Q").tolist()
        offs = memoryview(batch.offsets).cast("B").cast("Q").tolist()
        if all(ln == lens[0] for ln in lens):
            # The loader fills a batch in read order, so its samples may lie
            # in any order in its memory: a view where they are evenly
            # spaced forwards, else one gather (a copy) into (n, len).
            stride = offs[1] - offs[0] if n > 1 else lens[0]
            if stride >= lens[0] and all(o == offs[0] + i * stride for i, o in enumerate(offs)):
                return data.as_strided((n, lens[0]), (stride, 1), offs[0])
            idx = torch.tensor(offs, dtype=torch.int64).unsqueeze(1) + torch.arange(lens[0])
            return data[idx]
        return [data[o:o + ln] for o, ln in zip(offs, lens)]

    # One loader serves pass after pass: opened at the first pass with every
    # epoch ahead of it, it keeps reading across the epoch boundary (the
    # first batch of the next epoch waits in _pending), so a new epoch
    # neither re-opens the dataset (re-reading its indexes) nor starts with
    # an empty pipeline. It is re-opened when the pass asks for another
    # place (set_epoch, load_state_dict, a pass left early) or another
    # rank/world, and in each process that iterates (DataLoader workers).
    _AHEAD_EPOCHS = 1 << 31

    def _open(self, rank, world, resume):
        self.close()
        self._ld = stoker.Loader(self.source, self.batch_size, rank=rank, world=world,
                                 epochs=min(resume[1] + self._AHEAD_EPOCHS, _EPOCH_LIMIT),
                                 resume=resume, **self.options)
        self._ld_key = (rank, world, os.getpid())
        self._ld_epoch = resume[1]
        self._loader = self._ld

    def close(self):
        """Stop the loader kept between passes (threads and buffers); the
        next pass opens a new one where the state says."""
        self._pending = None
        self._stack_pool = None
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None and pool[1] == os.getpid():
            pool[0].shutdown(wait=True)
        ld, self._ld = getattr(self, "_ld", None), None
        self._loader = None
        if ld is not None and self._ld_key[2] == os.getpid():
            try:
                self._last_stats = ld.stats()
            except (stoker.Error, ValueError, RuntimeError):
                pass
            ld.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass

    def __getstate__(self):  # DataLoader workers (spawn): the loader stays here
        d = dict(self.__dict__)
        d["_ld"] = d["_loader"] = d["_pending"] = d["_pool"] = d["_stack_pool"] = None
        if multiprocessing.context.get_spawning_popen() is None:
            d["_shared"] = None  # not on its way to a worker: cannot travel
        return d

    def _token_item(self, batch):
        """A token batch as the dict a GPT training step takes (Megatron's
        field names): inputs, labels shifted by one and the loss mask on the
        labels, views of the batch's memory; with document windows or
        packing also the documents' boundaries over the flattened inputs
        (flash-attention's cu_seqlens) and positions restarting at each."""
        t = torch.from_dlpack(batch.data)  # [B, S + 1]
        mask = torch.from_dlpack(batch.loss_mask)
        item = {"tokens": t[:, :-1], "labels": t[:, 1:], "loss_mask": mask[:, 1:]}
        if self.options.get("windows", "megatron") != "megatron":
            rows, s = t.shape[0], t.shape[1] - 1
            cu = torch.from_dlpack(batch.cu_seqlens)
            counts = torch.from_dlpack(batch.cu_count).tolist()
            flat, pos = [0], torch.empty((rows, s), dtype=torch.int64)
            for i in range(rows):
                bounds = sorted({min(int(b), s) for b in cu[i, :counts[i]].tolist()} | {0, s})
                for a, b in zip(bounds, bounds[1:]):
                    pos[i, a:b] = torch.arange(b - a)
                    flat.append(i * s + b)
            item["cu_seqlens"] = torch.tensor(flat, dtype=torch.int32)
            item["position_ids"] = pos
        if self.return_indices:
            item["windows"] = torch.tensor(memoryview(batch.windows).cast("B").cast("q"))
        return item

    # -- dict samples and the transform hook -----------------------------------
    # The Python work (field decoders, the user's transform) runs here, in
    # the thread that iterates or in a pool of transform_threads threads:
    # the loader's own threads never take the GIL.

    def _map(self, fn, items):
        if self.transform_threads <= 1 or len(items) < 2:
            return [fn(x) for x in items]
        if self._pool is None or self._pool[1] != os.getpid():
            from concurrent.futures import ThreadPoolExecutor
            self._pool = (ThreadPoolExecutor(self.transform_threads,
                                             thread_name_prefix="stoker-transform"), os.getpid())
        return list(self._pool[0].map(fn, items))

    def _stacks(self):
        """This process's fields.StackPool: the memory collate stacks image
        batches into, reused once nothing refers to a batch made in it."""
        sp = getattr(self, "_stack_pool", None)
        if sp is None or sp[1] != os.getpid():
            sp = self._stack_pool = (fields.StackPool(), os.getpid())
        return sp[0]

    def _fields_item(self, batch):
        dec, tf = self.decoders, self.transform if self.transform_on == "sample" else None
        layout = self.options.get("layout", "hwc")

        def one(i):
            d = fields.sample(batch, i, dec, layout)
            return tf(d) if tf is not None else d

        item = fields.collate(self._map(one, range(len(batch))), self._stacks())
        if self.transform is not None and self.transform_on == "batch":
            item = self.transform(item)
        return item

    def _item(self, batch):
        if self.options.get("seq_len"):
            return self._token_item(batch)
        if self.options.get("decode") == "fields":
            return self._fields_item(batch)
        x = self._inputs(batch)
        if self.transform is not None and self.transform_on == "sample":
            out = self._map(self.transform, list(x))
            x = torch.stack(out) if out and all(
                isinstance(t, torch.Tensor) and t.shape == out[0].shape for t in out) else out
        y = torch.from_dlpack(batch.labels).long()
        if self.return_indices:
            item = (x, y, torch.tensor(memoryview(batch.indices).cast("B").cast("q")))  # u64 -> i64
        else:
            item = (x, y)
        if self.transform is not None and self.transform_on == "batch":
            item = self.transform(item)
        return item

    def __iter__(self):
        if self._active:
            # A second pass while one is in progress (two iterators at
            # once): a loader of its own for this epoch, so neither pass
            # loses samples to the other; the state stays the first's.
            yield from self._on_device(self._side_pass(), False)
            return
        self._active = True
        try:
            yield from self._on_device(self._pass(), True)
        finally:
            self._active = False

    def _on_device(self, items, main):
        """items as they are, or with device= each moved to the GPU, one
        batch ahead: batch k+1's copy is issued on stoker's stream before
        batch k is handed out, so it overlaps the consumer's work on k
        even where the consumer waits for the GPU every step (loss.item()).

        Torch's own calls do the device side: copies with non_blocking=True
        inside torch.cuda.stream(side) into tensors torch allocates, an
        event recorded after them that the consumer's current stream waits
        on at hand-out (wait_event: the copy of the batch ahead stays
        concurrent), and record_stream so that torch does not give a
        handed-out tensor's memory to the side stream again before the
        consumer's work on it is done. The pinned batch is dropped inside
        the side stream's context, so stoker's release event goes on that
        stream, after the copy (see docs/python.md, pin_memory). main: the
        pass whose position state_dict() reports, which stays that of the
        batch handed out, not of the one ahead."""
        if self.device is None:
            yield from items
            return
        if get_worker_info() is not None:
            raise RuntimeError("device=: CUDA cannot be used in DataLoader worker processes; "
                               "iterate in the main process (num_workers=0)")
        dev = self.device
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        side = torch.cuda.Stream(device=dev)
        ahead = None  # (tensors on dev, event after their copy, state at that batch)
        end = None    # the state after the pass, once items are exhausted
        try:
            while True:
                moved = None
                with torch.cuda.device(dev), torch.cuda.stream(side):
                    try:
                        item = next(items)
                    except StopIteration:
                        item = None
                        end = self._state
                    if item is not None:
                        moved = (tuple(_to_device(x, dev) for x in item)
                                 if isinstance(item, tuple) else _to_device(item, dev))
                        del item  # the pinned batch goes here: its event follows the copy on side
                        done = torch.cuda.Event()
                        done.record(side)
                        state = self._state
                if ahead is not None:
                    out, ev, st = ahead
                    ahead = None
                    consumer = torch.cuda.current_stream(dev)
                    consumer.wait_event(ev)
                    for t in _tensors(out):
                        t.record_stream(consumer)
                    if main:
                        self._state = st
                    yield out
                    del out
                if moved is None:
                    break
                ahead = (moved, done, state)
        finally:
            # Closing a pass left early drops the batch whose copy is still
            # in flight on side: its release event must go on side too.
            with torch.cuda.device(dev), torch.cuda.stream(side):
                items.close()
            if main and end is not None:
                self._state = end

    def _side_pass(self):
        rank, world = self.rank_world()
        with stoker.Loader(self.source, self.batch_size, rank=rank, world=world,
                           epochs=self._epoch + 1, resume=(self.seed, self._epoch, 0),
                           **self.options) as ld:
            for batch in ld:
                item = self._item(batch)
                del batch
                yield item

    def _pass(self):
        rank, world = self.rank_world()
        shared = getattr(self, "_shared", None)
        if get_worker_info() is not None and shared is not None:
            shared[0] = 1
            if self._resume is None:  # where this process's parent says
                self._epoch = shared[1]
        epoch = self._epoch
        reuse = (self._resume is None and getattr(self, "_ld", None) is not None
                 and not self._ld.closed and self._ld_key == (rank, world, os.getpid())
                 and self._ld_epoch == epoch)
        if not reuse:
            self._open(rank, world, self._resume or (self.seed, epoch, 0))
        self._resume = None
        ld = self._ld
        finished = False
        try:
            while True:
                batch, self._pending = self._pending, None
                if batch is None:
                    try:
                        batch = next(ld)
                    except StopIteration:
                        break
                if batch.epoch != epoch:  # the next epoch's first batch: keep it
                    self._pending = batch
                    break
                item = self._item(batch)
                self._state = ld.state()
                del batch
                yield item
            finished = True
        finally:
            if not finished:
                # Left early (break, an exception): the next pass continues
                # this epoch after the last batch handed out, as a resume
                # from state_dict() would (set_epoch() starts another).
                st = self._state
                self._resume = (st["seed"], st["epoch"], st["position"], st.get("dataset", 0))
                self.close()
        self._epoch = epoch + 1
        self._ld_epoch = epoch + 1
        self._state = {"seed": self.seed, "epoch": epoch + 1, "position": 0}
        if shared is not None and shared[1] < epoch + 1:
            shared[1] = epoch + 1

    def stats(self):
        """stoker.Loader.stats() of the loader serving the passes (counted
        since it opened), or of the last one closed."""
        if self._loader is not None and not self._loader.closed:
            return self._loader.stats()
        return self._last_stats

    def report(self, file=None):
        """Stage table and verdict of the pass in progress or the last one."""
        import sys
        st = self.stats()
        if st is None:
            raise RuntimeError("report(): no pass has run yet")
        text, verdict = stoker.format_report(st)
        print(text, file=file or sys.stdout)
        return verdict


def _cuda_device(device):
    """device= as a torch.device of type cuda (index None: the current
    device at each pass), or None; refused where torch sees no GPU."""
    if device is None:
        return None
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {device!r} is not a device (expected \"cuda\" or "
                         f"\"cuda:N\")") from None
    if d.type != "cuda":
        raise ValueError(f"device: {device!r}: batches are moved to CUDA devices only "
                         f"(leave device out for CPU tensors)")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r}: torch finds no CUDA device "
                           f"(torch.cuda.is_available() is False)")
    if d.index is not None and d.index >= torch.cuda.device_count():
        raise ValueError(f"device: {device!r}: torch sees {torch.cuda.device_count()} CUDA devices")
    return d


def _to_device(x, dev):
    """x's tensors copied to dev without waiting, in the same structure (a
    tuple, list or dict of them: dict samples, a transform's output; other
    values as they are). Memory torch did not pin is pinned first (torch's
    caching host allocator, which fences its reuse itself): a non_blocking
    copy from pageable memory would wait for the side stream's earlier
    copies."""
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(t, dev) for t in x)
    if isinstance(x, dict):
        return {k: _to_device(v, dev) for k, v in x.items()}
    if not isinstance(x, torch.Tensor):
        return x
    if not x.is_pinned():
        x = x.pin_memory()
    return x.to(dev, non_blocking=True)


def _tensors(item):
    if isinstance(item, torch.Tensor):
        yield item
    elif isinstance(item, (list, tuple)):
        for x in item:
            yield from _tensors(x)
    elif isinstance(item, dict):
        for x in item.values():
            yield from _tensors(x)


def loader(source, batch_size=64, **options):
    """The dataset to iterate directly (for x, y in loader(...)): stoker's
    own threads read and decode, so no torch DataLoader is needed. Takes
    every StokerDataset / stoker.Loader option."""
    return StokerDataset(source, batch_size, **options)


# DCP storage on the checkpoint tier (stoker/torch_dcp.py).
from stoker.torch_dcp import CheckpointReader, CheckpointWriter  # noqa: E402
