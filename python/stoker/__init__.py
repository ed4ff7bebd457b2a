"""stoker: libstoker's data loader for Python.

    import stoker
    with stoker.Loader("data/train", batch_size=256, decode="jpeg", layout="chw",
                       shuffle=True, seed=1, epochs=90) as loader:
        for batch in loader:
            x = torch.from_dlpack(batch.data)      # no copy: the loader's memory
            y = torch.from_dlpack(batch.labels)
            ...
        loader.report()                            # stage table and what the loop waited for

Batches are zero-copy: a batch's memory goes back to the loader's pool only
when the batch and every view of it (numpy arrays, memoryviews, torch
tensors) are gone, so a tensor kept after the loop moved on still holds its
data. stoker.torch wraps the loader as a torch IterableDataset with
rank/world-size sharding and state_dict() resume. docs/python.md is the
full reference.
"""
import json
import logging
import math
import sys
import threading
import warnings

from . import _stoker
from ._stoker import Array, Batch, gen

__all__ = ["Loader", "Batch", "Array", "Error", "gen", "version", "set_log_level"]
__version__ = _stoker.version
version = _stoker.version

_log = logging.getLogger("stoker")

# ---- errors -------------------------------------------------------------------


class Error(Exception):
    """A libstoker error. code is the C code (e.g. -7), name its C name
    ("STK_ECRC"), detail the library's sentence (file, offset, cause)."""

    code = 0
    name = "STK_ERROR"

    def __init__(self, code=None, detail=""):
        if code is not None:
            self.code = code
        self.detail = detail
        super().__init__(detail or self.__class__.__doc__)

    def __reduce__(self):
        return (self.__class__, (self.code, self.detail))


# Python names of the C codes (the table is libstoker's own: _errors()).
_CLASS_NAMES = {
    "STK_EINVAL": "InvalidArgumentError", "STK_ENOMEM": "OutOfMemoryError",
    "STK_EIO": "InputOutputError", "STK_ENOENT": "NotFoundError",
    "STK_EACCES": "PermissionDeniedError", "STK_EFORMAT": "FormatError",
    "STK_ECRC": "ChecksumError", "STK_ETRUNC": "TruncatedError", "STK_ERANGE": "RangeError",
    "STK_EEMPTY": "EmptyDatasetError", "STK_ENOTSUP": "NotSupportedError",
    "STK_EOF": "EndOfDataError", "STK_ECANCELED": "CanceledError",
    "STK_ETIMEDOUT": "TimedOutError", "STK_EDECODE": "DecodeError",
    "STK_ENOSPC": "NoSpaceError", "STK_EEXIST": "ExistsError", "STK_EUSAGE": "UsageError",
    "STK_EBUSY": "BusyError", "STK_ESYS": "SystemCallError", "STK_EAGAIN": "NotReadyError",
    "STK_ENET": "NetworkError",
}
_classes = {}
for _code, (_cname, _msg) in sorted(_stoker._errors().items(), reverse=True):
    _pyname = _CLASS_NAMES.get(_cname) or (_cname[5:].capitalize() + "Error")
    _cls = type(_pyname, (Error,), {"__doc__": f"{_cname}: {_msg}.", "code": _code,
                                    "name": _cname, "__module__": __name__})
    globals()[_pyname] = _cls
    __all__.append(_pyname)
    _classes[_code] = _cls
del _code, _cname, _msg, _pyname, _cls

_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO,
           "debug": logging.DEBUG}


def _log_sink(level, msg):
    _log.log(_LEVELS.get(level, logging.WARNING), "%s", msg)


_stoker._register(Error, _classes, _log_sink, threading.main_thread().ident)


def set_log_level(level):
    """Level of libstoker's own messages ("error", "warning", "info", "debug", or a
    logging level number); they go to the logging module's "stoker" logger."""
    if isinstance(level, int) and not isinstance(level, bool):
        lv = 0 if level >= logging.ERROR else 1 if level >= logging.WARNING else \
            2 if level >= logging.INFO else 3
    elif isinstance(level, str) and level.lower() in ("error", "warning", "warn", "info", "debug"):
        lv = {"error": 0, "warning": 1, "warn": 1, "info": 2, "debug": 3}[level.lower()]
    else:
        raise ValueError(f"level: expected error, warning, info, debug or a logging level, not {level!r}")
    _stoker._set_log_level(lv)


# ---- argument checking ----------------------------------------------------------

# ImageNet's per-channel mean and std in 0..255 units: the decoder's default
# (src/loader/image.c), here to complete a mean or std given alone.
_IMAGENET_MEAN = (123.675, 116.28, 103.53)
_IMAGENET_STD = (58.395, 57.12, 57.375)

_SIZE_UNITS = {"": 1, "k": 1024, "kib": 1024, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30,
               "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40, "kb": 1000, "mb": 10**6,
               "gb": 10**9, "tb": 10**12}


def _int(name, v, lo=0, hi=(1 << 64) - 1, none_ok=True):
    if v is None and none_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name}: expected an int, not {type(v).__name__}")
    if v < lo or v > hi:
        raise ValueError(f"{name}: {v} is out of range [{lo}, {hi}]")
    return v


def _bool(name, v):
    if not isinstance(v, bool) and v not in (0, 1):
        raise TypeError(f"{name}: expected a bool, not {type(v).__name__}")
    return int(bool(v))


def _size(name, v):
    """Bytes: an int, or a string like "64MiB" (the CLI's sizes)."""
    if v is None:
        return None
    if isinstance(v, str):
        s = v.strip().lower()
        num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = s[len(num):].strip()
        try:
            x = float(num)
        except ValueError:
            raise ValueError(f"{name}: {v!r} is not a size (e.g. 4096, 64MiB, 1GiB)") from None
        if unit not in _SIZE_UNITS or x < 0:
            raise ValueError(f"{name}: {v!r} is not a size (e.g. 4096, 64MiB, 1GiB)")
        return int(x * _SIZE_UNITS[unit])
    return _int(name, v)


def _choice(name, v, choices):
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected one of {', '.join(choices)}, not {type(v).__name__}")
    if v not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, not {v!r}")
    return choices.index(v)


def _pair(name, v, kind=float):
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise TypeError(f"{name}: expected a pair (a, b)")
    try:
        return kind(v[0]), kind(v[1])
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected two numbers") from None


def _str(name, v):
    if v is None:
        return None
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected a str, not {type(v).__name__}")
    if "\0" in v:
        raise ValueError(f"{name}: embedded NUL character")
    return v


def _source(v):
    import os
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if isinstance(v, bytes):
        v = os.fsdecode(v)
    if not isinstance(v, str):
        raise TypeError(f"source: expected a path, URL or pattern (str or os.PathLike), "
                        f"not {type(v).__name__}")
    if not v or "\0" in v:
        raise ValueError("source: empty or contains a NUL character")
    return v


def _blend(v):
    """A blend of Megatron datasets: the CLI's 'W1 PATH1 W2 PATH2 ...' or
    a list of (weight, path) pairs, as [(float, str), ...]; None alone."""
    if v is None:
        return None
    if isinstance(v, str):
        parts = v.split()
        if not parts or len(parts) % 2:
            raise ValueError(f"blend: {v!r} is not 'W1 PATH1 W2 PATH2 ...'")
        v = list(zip(parts[0::2], parts[1::2]))
    try:
        pairs = [(w, p) for w, p in v]
    except (TypeError, ValueError):
        raise TypeError("blend: expected (weight, path) pairs or 'W1 PATH1 W2 PATH2 ...'") from None
    out = []
    for w, p in pairs:
        try:
            wf = float(w)
        except (TypeError, ValueError):
            raise ValueError(f"blend: weight {w!r} is not a number") from None
        if not math.isfinite(wf) or wf <= 0:
            raise ValueError(f"blend: weight {w!r} must be a positive number")
        out.append((wf, _source(p)))
    if not out:
        raise ValueError("blend: no datasets")
    return out


_pin_warned = False


def _torch_cuda_device():
    """torch's current CUDA device if torch has initialized CUDA in this
    process, else -1 (the library then takes LOCAL_RANK, else device 0).
    Never initializes CUDA itself: that alone would make a context on
    device 0 in every rank."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda.current_device()
    except (AttributeError, RuntimeError):
        pass
    return -1


def _release_stream():
    """(cudaStream_t, device) of the stream torch copies on now in this
    thread: a pinned batch released here goes back to the pool only after
    the work queued on it so far (x.cuda(non_blocking=True)) has completed.
    (0, -1), the legacy default stream, when torch has not initialized CUDA."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        s = torch.cuda.current_stream()
        return s.cuda_stream, s.device.index
    return 0, -1


class Loader(_stoker.Loader):
    """Loader(source, batch_size=64, *, shuffle=True, seed=0, epochs=1, ...)

    Stream batches of the dataset at source through libstoker's pipeline
    (sampler -> reads -> decode workers -> batches -> prefetch ring).

    source: a directory of shards, one shard file, an MDS directory, a URL
      (file://, http(s)://, s3://bucket/prefix; read through the shard
      cache) or a WebDataset-style pattern, exactly as `stoker feed` takes it.

    Pipeline:
      batch_size=64       samples per batch
      threads=0           decode workers (0: number of cores)
      epochs=1            epochs to run
      drop_last=False     drop the final partial batch of each epoch
      epoch_samples=0     use only this many of this rank's samples per epoch (0: all)
    Sampling:
      shuffle=True        True/"auto" (global for random-access formats, else block),
                          False/"none", "global", "block"
      seed=0              shuffle and augmentation seed (with seq_len: Megatron's
                          random_seed, default 1234)
      window=4096         block-shuffle window in samples
      rank=0, world=1     read rank's share of world ranks
      shares="uneven"     when world does not divide an epoch: "uneven" (shares
                          differ by one), "pad" (all ceil(n/world), the last round
                          wrapping to the epoch's start) or "drop" (all
                          floor(n/world)); pad and drop give every rank the same
                          number of batches, as DistributedSampler does
      resume=None         a state from state() / state_dict() to continue from
    Decode:
      decode="raw"        "raw", "jpeg", "npy" or "fields" (every field of each
                          sample with its name, type and shape: dict samples
                          through stoker.fields.samples(batch))
      field=None          field to decode (default: the first of each sample);
                          with decode="fields", the fields to keep, "jpg,cls"
                          (default: all)
      image_fields=None   with decode="fields", the image fields decoded in C
                          (JPEG, PNG, WebP by their bytes) instead of passed as
                          stored: "*" (every *.jpg/jpeg/png/webp field), names,
                          "-name" to leave one out, comma-separated ("*,-seg.png")
      size=224            JPEG output size: int or (height, width); with
                          decode="fields", None (the default there) keeps each
                          image field at its own size, a size applies the
                          decode="jpeg" transform (crop, resize, dtype, layout)
      dtype="u8"          "u8" or "f32" (normalized by mean/std)
      layout="hwc"        "hwc" or "chw"
      eval=False          center crop instead of random resized crop + flip
      scale=(0.08, 1.0)   random-resized-crop area range
      ratio=(3/4, 4/3)    random-resized-crop aspect range
      mean, std           per-channel, in 0..255 units (default ImageNet's)
    I/O and memory:
      format=None         "tfrecord", "wds", "npy", "npz", "mds", "files" (None: detect)
      index_threads=0     threads building shard indexes at open (0: number of cores)
      engine="auto"       "auto", "io_uring", "pread", "mmap" or "mapcopy"
      direct=False        O_DIRECT reads
      verify=True         check stored checksums
      on_error=None       a sample that cannot be read or decoded: "skip" leaves it
                          out and counts it (batch.skipped, stats()["skipped"]);
                          "fail" raises stoker.Error naming its file and why;
                          None (default) skips, but raises after 64 failures
                          in a row (a wrong dataset or option, or one gone)
      prefetch=2          initial ring depth in batches (4 for token windows)
      prefetch_max=16     depth the ring may grow to
      mem_cap="1GiB"      cap on batch-buffer bytes
      inflight="64MiB"    bytes of reads in flight
      io_depth=64         read requests in flight
      pin_memory=False    page-locked batch buffers (CUDA runtime, loaded at run
                          time); without a GPU it warns once and goes on
    Token windows (LLM training on Megatron-LM indexed datasets, .bin + .idx;
    docs/internals/tokens.md):
      seq_len=None        tokens per sample: batches become [batch, seq_len + 1]
                          token arrays in Megatron GPTDataset's order
      samples=0           windows wanted (Megatron's num_samples; 0: one epoch)
      split=None          Megatron's split, "969,30,1"; split_index=0 the part
      blend=None          several datasets mixed by weight: [(w, path), ...] or
                          "W1 PATH1 W2 PATH2" (Megatron's BlendedDataset; needs samples)
      windows="megatron"  "megatron" (across documents), "document" (within one,
                          padded) or "pack" (whole documents, boundaries in cu_seqlens)
      tokens="int64"      "int64" or "int32" batches
      index_dir=None      where window index files live (None: beside the data)
    Cache (URLs, or a path staged through a disk tier):
      cache_dir, cache_size, ram_cache_size, cache_min_free, cache_prefetch
      (size, or "off"), fetchers, cache_no_fsync, cache_chunk_size (chunks a
      remote Megatron .bin is read in: 4KiB..4GiB, default 64MiB; processes
      sharing a cache_dir should agree on it), s3_endpoint, s3_region,
      s3_profile, s3_addressing ("auto", "path", "virtual"), connect_timeout_s,
      retry_max_s

    Iterate it for Batch objects (or use next()); it is a context manager;
    close() stops it. stats() gives the per-stage figures, report() prints
    them with a verdict on what the loop waited for. Errors raise subclasses
    of stoker.Error carrying the library's message (file, offset, cause).
    """

    def __init__(self, source, batch_size=64, **options):
        src, opts = _options(source, batch_size, **options)
        self.source = src
        self.batch_size = opts["batch_size"]
        self.options = opts
        copts = opts
        if opts.get("pin_memory"):
            copts = dict(opts, pin_device=_torch_cuda_device())
        super().__init__(src, copts)
        if self.pinned:
            self._set_release_stream(_release_stream)
        if self._pin_error:
            global _pin_warned
            if not _pin_warned:
                _pin_warned = True
                warnings.warn(f"stoker: pin_memory=True but batches stay in pageable memory: "
                              f"{self._pin_error}", RuntimeWarning, stacklevel=2)

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"<stoker.Loader {self.source!r} batch_size={self.batch_size} {state}>"

    def state(self):
        """Where the loader stands after the last batch handed out, as
        {"seed", "epoch", "position", "dataset"}: pass it as resume= to
        continue with exactly the remaining samples (any world size).
        "dataset" is the dataset's fingerprint (its format, shard names,
        sizes and sample counts): a resume on another dataset is refused."""
        seed, epoch, position, dataset = self._state()
        return {"seed": seed, "epoch": epoch, "position": position, "dataset": dataset}

    def epoch_batches(self):
        """Batches this rank gets in a whole epoch with these options (its
        share, epoch_samples, batch_size, drop_last); a streamed dataset is
        counted whole first. samples skipped by on_error may give fewer."""
        return self._epoch_batches()

    def dataset_info(self):
        """{"samples", "samples_complete", "shards", "format"} of the open dataset.

        A remote dataset without a manifest counts its shards as they
        arrive: "samples" is what is counted so far, and "samples_complete"
        is False until every shard has been read once."""
        return self._dataset_info()

    def stats(self):
        """The per-stage stats as a dict, with the keys of the C JSON
        (stoker feed --json): wall_ns, batches, samples, consumer_wait_ns,
        stages (read, decode, batch, ring: busy/wait_in/wait_out ns, items,
        bytes, threads), ring depth, memory, cache figures."""
        return json.loads(self._stats_json())

    def report(self, file=None):
        """Print the stage table and a one-line verdict on what the loop
        waited for (to file, default stdout); returns the verdict."""
        import sys
        text, verdict = format_report(self.stats())
        print(text, file=file or sys.stdout)
        return verdict


def _options(source, batch_size=64, *, shuffle=True, seed=None, epochs=1,
             drop_last=False, epoch_samples=0, threads=0, window=0, rank=0, world=1,
             shares="uneven", resume=None, decode="raw", field=None, image_fields=None, size=None, dtype="u8", layout="hwc",
             eval=False, scale=None, ratio=None, mean=None, std=None, format=None,
             engine="auto", direct=False, verify=True, on_error=None, prefetch=0,
             prefetch_max=0, mem_cap=0, inflight=0, io_depth=0, pin_memory=False,
             index_threads=0, cache_dir=None, cache_size=None, ram_cache_size=None,
             cache_min_free=None, cache_prefetch=None, fetchers=None, cache_no_fsync=False,
             cache_chunk_size=None, s3_endpoint=None, s3_region=None, s3_profile=None, s3_addressing="auto",
             connect_timeout_s=None, retry_max_s=None, seq_len=None, samples=0, split=None,
             split_index=0, blend=None, windows="megatron", tokens="int64", index_dir=None):
    o = {}
    o["seq_len"] = _int("seq_len", seq_len, 1, 1 << 30)
    o["blend"] = _blend(blend)
    if o["blend"] is not None and o["seq_len"] is None:
        raise ValueError("blend: token windows need seq_len")
    # A blend names its datasets itself: the source may be None then.
    src = _source(source) if not (o["blend"] and source is None) else o["blend"][0][1]
    if o["seq_len"] is not None:
        o["samples"] = _int("samples", samples)
        o["split"] = _str("split", split)
        o["split_index"] = _int("split_index", split_index, 0, 2)
        o["windows"] = _choice("windows", windows, ["megatron", "document", "pack"])
        o["tokens"] = _choice("tokens", tokens, ["int32", "int64"])
        o["index_dir"] = _str("index_dir", index_dir)
    elif samples or split is not None or split_index or index_dir is not None:
        raise ValueError("samples, split, split_index, index_dir: token windows need seq_len")
    o["batch_size"] = _int("batch_size", batch_size, 1, 1 << 24, none_ok=False)
    o["threads"] = _int("threads", threads, 0, 4096)
    o["epochs"] = _int("epochs", epochs, 1, (1 << 32) - 1)
    o["drop_last"] = _bool("drop_last", drop_last)
    o["epoch_samples"] = _int("epoch_samples", epoch_samples)
    if isinstance(shuffle, bool):
        o["shuffle"] = 0 if shuffle else 1
    else:
        o["shuffle"] = _choice("shuffle", shuffle, ["auto", "none", "global", "block"])
    # With token windows the seed is Megatron's random_seed (default 1234).
    o["seed"] = _int("seed", (1234 if o["seq_len"] else 0) if seed is None else seed,
                     0, (1 << 32) - 1 if o["seq_len"] else (1 << 64) - 1)
    o["window"] = _int("window", window)
    o["rank"] = _int("rank", rank, 0, (1 << 32) - 1)
    o["world"] = _int("world", world, 1, (1 << 32) - 1)
    o["shares"] = _choice("shares", shares, ["uneven", "pad", "drop"])
    if o["rank"] >= o["world"]:
        raise ValueError(f"rank: {rank} is not below world ({world})")
    if resume is not None:
        o["resume"] = _resume_tuple(resume)
    o["decode"] = _choice("decode", decode, ["raw", "jpeg", "npy", "fields"])
    o["field"] = _str("field", field)
    o["image_fields"] = _str("image_fields", image_fields)
    if o["image_fields"] and decode != "fields":
        raise ValueError('image_fields: only with decode="fields"')
    if size is None and decode == "fields":
        size = 0  # image fields at their own size
    elif size is None:
        size = 224
    if size == 0 and decode == "fields":
        h = w = 0
    elif isinstance(size, (tuple, list)):
        h, w = _pair("size", size, int)
    else:
        h = w = _int("size", size, 1, 1 << 14, none_ok=False)
    if (h, w) != (0, 0) and not (0 < h <= 1 << 14 and 0 < w <= 1 << 14):
        raise ValueError(f"size: {size!r} is out of range")
    o["out_h"], o["out_w"] = h, w
    o["dtype"] = _choice("dtype", dtype, ["u8", "f32"])
    o["layout"] = _choice("layout", layout, ["hwc", "chw"])
    o["train"] = 0 if _bool("eval", eval) else 1
    if scale is not None:
        o["scale_min"], o["scale_max"] = _pair("scale", scale)
        if not 0 < o["scale_min"] <= o["scale_max"] <= 1:
            raise ValueError(f"scale: {scale!r} is not 0 < min <= max <= 1")
    if ratio is not None:
        o["ratio_min"], o["ratio_max"] = _pair("ratio", ratio)
        if not 0 < o["ratio_min"] <= o["ratio_max"]:
            raise ValueError(f"ratio: {ratio!r} is not 0 < min <= max")
    # One of the two alone keeps ImageNet's other (the C default applies
    # only when neither is given).
    if (mean is None) != (std is None):
        mean = _IMAGENET_MEAN if mean is None else mean
        std = _IMAGENET_STD if std is None else std
    for nm, v in (("mean", mean), ("std", std)):
        if v is None:
            continue
        if not isinstance(v, (tuple, list)) or len(v) != 3:
            raise TypeError(f"{nm}: expected three numbers (one per channel)")
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise TypeError(f"{nm}: expected three numbers (one per channel)")
            if not math.isfinite(x):
                raise ValueError(f"{nm}: every value must be a finite number")
            if nm == "std" and x <= 0:
                raise ValueError("std: every value must be > 0")
            o[f"{nm}{i}"] = float(x)
    o["format"] = _str("format", format)
    _choice("engine", engine, ["auto", "io_uring", "pread", "mmap", "mapcopy"])
    o["engine"] = engine
    o["direct"] = _bool("direct", direct)
    o["skip_verify"] = 0 if _bool("verify", verify) else 1
    # None: skip and count, but stop after 64 failures in a row (C's
    # STK_ON_ERROR_DEFAULT, 0); "skip" (1) goes on regardless; "fail" (2).
    o["on_error"] = 0 if on_error is None else 1 + _choice("on_error", on_error, ["skip", "fail"])
    o["prefetch"] = _int("prefetch", prefetch, 0, 1 << 16)
    o["prefetch_max"] = _int("prefetch_max", prefetch_max, 0, 1 << 16)
    if o["prefetch_max"] and o["prefetch"] > o["prefetch_max"]:
        raise ValueError("prefetch: larger than prefetch_max")
    o["mem_cap"] = _size("mem_cap", mem_cap)
    o["inflight"] = _size("inflight", inflight)
    o["io_depth"] = _int("io_depth", io_depth, 0, 1 << 16)
    o["pin_memory"] = _bool("pin_memory", pin_memory)
    o["index_threads"] = _int("index_threads", index_threads, 0, 4096)
    o["cache_dir"] = _str("cache_dir", cache_dir)
    o["cache_size"] = _size("cache_size", cache_size)
    o["ram_cache_size"] = _size("ram_cache_size", ram_cache_size)
    o["cache_min_free"] = _size("cache_min_free", cache_min_free)
    if cache_prefetch is not None:
        o["cache_prefetch"] = -1 if cache_prefetch in ("off", False) else \
            _size("cache_prefetch", cache_prefetch)
    o["fetchers"] = _int("fetchers", fetchers, 0, 4096)
    o["cache_no_fsync"] = _bool("cache_no_fsync", cache_no_fsync)
    o["cache_chunk_size"] = _size("cache_chunk_size", cache_chunk_size)
    if o["cache_chunk_size"] is not None and not 4096 <= o["cache_chunk_size"] <= 1 << 32:
        raise ValueError(f"cache_chunk_size: {cache_chunk_size!r} is outside 4KiB..4GiB")
    o["s3_endpoint"] = _str("s3_endpoint", s3_endpoint)
    o["s3_region"] = _str("s3_region", s3_region)
    o["s3_profile"] = _str("s3_profile", s3_profile)
    o["s3_addressing"] = _choice("s3_addressing", s3_addressing, ["auto", "path", "virtual"])
    for nm, v in (("connect_timeout_s", connect_timeout_s), ("retry_max_s", retry_max_s)):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"{nm}: expected a number of seconds > 0")
            o[nm] = float(v)
    o["want_cache"] = int(any(o.get(k) not in (None, 0) for k in (
        "cache_dir", "cache_size", "ram_cache_size", "cache_min_free", "cache_prefetch",
        "fetchers", "cache_no_fsync", "cache_chunk_size", "s3_endpoint", "s3_region",
        "s3_profile", "s3_addressing", "connect_timeout_s", "retry_max_s")))
    return src, {k: v for k, v in o.items() if v is not None}


# help(stoker.Loader) and inspect show every option, not **options.
Loader.__signature__ = __import__("inspect").signature(_options)


def _resume_tuple(resume):
    if isinstance(resume, dict):
        try:
            t = (_int("resume['seed']", resume["seed"], none_ok=False),
                 _int("resume['epoch']", resume["epoch"], none_ok=False),
                 _int("resume['position']", resume["position"], none_ok=False))
        except KeyError as e:
            raise ValueError(f"resume: missing key {e}") from None
        # States from before fingerprints have no "dataset": not checked.
        return t + (_int("resume['dataset']", resume.get("dataset", 0), none_ok=False),)
    if isinstance(resume, (tuple, list)) and len(resume) in (3, 4):
        return tuple(_int("resume", x, none_ok=False) for x in resume)
    raise TypeError("resume: expected a state dict {'seed', 'epoch', 'position', 'dataset'} "
                    "from state()")


def format_report(st):
    """(table text, verdict line) for a stats() dict."""
    wall = max(st.get("wall_s", 0.0), 1e-9)
    wait = st.get("consumer_wait_s", 0.0)
    lines = [f"{'stage':<8} {'threads':>7} {'busy %':>8} {'wait in %':>10} {'wait out %':>11} "
             f"{'items':>9} {'MB':>9}"]
    busiest, busiest_share = None, -1.0
    for s in st.get("stages", []):
        thr = max(s.get("threads", 1), 1)
        busy = s.get("busy_s", 0) / (wall * thr) * 100
        win = s.get("wait_in_s", 0) / (wall * thr) * 100
        wout = s.get("wait_out_s", 0) / (wall * thr) * 100
        lines.append(f"{s.get('name', '?'):<8} {thr:>7} {busy:>8.1f} {win:>10.1f} {wout:>11.1f} "
                     f"{s.get('items', 0):>9} {s.get('bytes', 0) / 1e6:>9.1f}")
        if s.get("name") in ("read", "decode", "batch") and busy > busiest_share:
            busiest, busiest_share = s.get("name"), busy
    share = wait / wall * 100
    n = st.get("samples", 0)
    lines.append(f"{st.get('batches', 0)} batches, {n} samples in {wall:.2f} s "
                 f"({n / wall:.0f} samples/s); the loop waited {wait:.2f} s ({share:.1f}%)")
    if share < 5:
        verdict = (f"input kept up: the loop waited {share:.1f}% of the time for batches; "
                   f"the loop's own work is the limit")
    else:
        verdict = (f"input-bound: the loop waited {share:.1f}% of the time for batches; "
                   f"the busiest stage is {busiest} ({busiest_share:.0f}% busy per thread)")
    lines.append("verdict: " + verdict)
    return "\n".join(lines), verdict
