"""Dict samples: batches of a loader opened with decode="fields".

libstoker packs each sample's fields (WebDataset members, TFRecord
features, MDS columns, npz arrays, a plain file) into the batch with their
names, and with the element type and shape where the format records them
(include/stoker/loader.h, STK_DECODE_FIELDS); this module turns them into
Python values, one decoder per field:

  "image"  jpg/jpeg/png/webp/...: a (3, H, W) uint8 torch tensor
           (torchvision.io.decode_image, RGB), or with no torchvision a
           (H, W, 3) numpy array through PIL. Fields the loader decoded in
           C (image_fields=, the default of stoker.torch) come as pixels;
           they are wrapped the same way, a (3, H, W) tensor viewing the
           batch (a channels-first view of HWC memory, as decode_image
           returns it, or contiguous with layout="chw"), pixel for pixel
           what the Python decode gives
  "npy"    a .npy member: a numpy array of its own dtype and shape, viewing
           the batch (no copy)
  "int"    cls/label/...: the ASCII integer
  "json"   the parsed JSON value
  "text"   str (UTF-8)
  "bytes"  bytes
  "array"  the raw bytes as a uint8 numpy array viewing the batch
  a callable: fn(memoryview) -> value, the user's own.

Fields whose type the format records (MDS ndarray and numeric columns,
DLIO's npz arrays) are numpy arrays of that dtype and shape whatever the
decoder. Every sample is a dict {field: value, "__key__": key,
"__index__": global sample number}, and "cls" is the class label where the
format gives one (class folders, TFRecord's label) and no field has that
name.
"""
import io
import json
import sys
import threading

import numpy as np

IMAGE_EXT = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "pbm", "bmp", "gif", "tif", "tiff")
INT_EXT = ("cls", "cls2", "label", "class", "index", "idx", "target")
TEXT_EXT = ("txt", "text", "caption")
DECODERS = ("image", "npy", "int", "json", "text", "bytes", "array")
NPY_MAGIC = b"\x93NUMPY"


def default_decoder(name):
    """The decoder a field gets by its name's last extension (WebDataset's
    convention: "seg.png" is an image)."""
    ext = name.rsplit(".", 1)[-1].lower()
    if ext in IMAGE_EXT:
        return "image"
    if ext in INT_EXT:
        return "int"
    if ext == "json":
        return "json"
    if ext in TEXT_EXT:
        return "text"
    if ext in ("npy", "npz"):
        return "npy"
    return "bytes"


def check_decoders(decoders):
    """decoders: None or {field: decoder name or callable}; a one-line
    error naming the field otherwise."""
    if decoders is None:
        return {}
    if not isinstance(decoders, dict):
        raise TypeError(f"decoders: expected a dict {{field: decoder}}, got {type(decoders).__name__}")
    for k, v in decoders.items():
        if not isinstance(k, str):
            raise TypeError(f"decoders: field names are str, got {k!r}")
        if not callable(v) and v not in DECODERS:
            raise ValueError(f"decoders: {k}: {v!r} is not a decoder ({', '.join(DECODERS)} "
                             f"or a callable)")
    return dict(decoders)


def _npy(buf):
    f = io.BytesIO(memoryview(buf)[:4096].tobytes())
    if f.read(6) != NPY_MAGIC:
        raise ValueError("not a .npy member (no \\x93NUMPY magic)")
    major, _ = f.read(2)
    read = {1: np.lib.format.read_array_header_1_0, 2: np.lib.format.read_array_header_2_0}
    if major not in read:
        raise ValueError(f"unsupported .npy version {major}")
    shape, fortran, dtype = read[major](f)
    data = np.frombuffer(buf, dtype=np.uint8)[f.tell():]
    n = int(np.prod(shape)) * dtype.itemsize
    if dtype.hasobject or data.size < n:
        raise ValueError("a .npy member with object dtype or truncated data")
    arr = data[:n].view(dtype)
    return arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)


def _image(buf):
    try:
        import torch
        from torchvision.io import ImageReadMode, decode_image
    except ImportError:
        from PIL import Image
        with Image.open(io.BytesIO(memoryview(buf).tobytes())) as im:
            return np.asarray(im.convert("RGB"))
    t = torch.frombuffer(bytearray(memoryview(buf)), dtype=torch.uint8)
    return decode_image(t, mode=ImageReadMode.RGB)


def _pixels(arr, layout):
    """Pixels decoded in C (H, W, 3 or 3, H, W by layout) as the "image"
    decoder gives an image: a (3, H, W) torch tensor, or without torch an
    (H, W, 3) numpy array."""
    try:
        import torch
    except ImportError:
        return arr if layout == "hwc" else arr.transpose(1, 2, 0)
    import warnings
    with warnings.catch_warnings():  # a read-only view of the batch: never written
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(arr)
    return t.permute(2, 0, 1) if layout == "hwc" else t


def decode_field(name, buf, dtype, shape, decoder, layout="hwc"):
    """One field's value: buf is an array viewing the batch's bytes.
    layout: the loader's, for image fields it decoded."""
    if dtype is not None and decoder == "image" and shape is not None and len(shape) == 3:
        return _pixels(np.frombuffer(buf, dtype=np.dtype(dtype).newbyteorder("<"))
                       .reshape(shape), layout)
    if dtype is not None:  # the format recorded type and shape
        arr = np.frombuffer(buf, dtype=np.dtype(dtype).newbyteorder("<"))
        return arr.reshape(shape if shape is not None else ())  # () : a 0-d array
    if callable(decoder):
        return decoder(memoryview(buf))
    if decoder == "npy":
        return _npy(buf)
    if decoder == "image":
        return _image(buf)
    if decoder == "array":
        return np.frombuffer(buf, dtype=np.uint8)
    b = memoryview(buf).tobytes()
    if decoder == "int":
        try:
            return int(b.decode("ascii").strip())
        except ValueError:
            raise ValueError(f"field {name}: {b[:32]!r} is not an integer (decoders={{{name!r}: "
                             f"'bytes'}} keeps it as bytes)") from None
    if decoder == "json":
        return json.loads(b)
    if decoder == "text":
        return b.decode("utf-8")
    return b


def sample(batch, i, decoders=None, layout="hwc"):
    """Sample i of a decode="fields" batch as a dict (see the module).
    layout: the Loader's (it matters only for image fields decoded in C)."""
    index, label, key, fields = batch._sample(i)
    decoders = decoders or {}
    out = {}
    for name, buf, dtype, shape in fields:
        dec = decoders.get(name) or default_decoder(name)
        if dec == "bytes" and name not in decoders and dtype is None and \
                bytes(memoryview(buf)[:6]) == NPY_MAGIC:
            dec = "npy"  # an npz array, or a .npy member by another name
        try:
            out[name] = decode_field(name, buf, dtype, shape, dec, layout)
        except ValueError as e:
            raise ValueError(f"sample {index} ({key or 'no key'}): field {name}: {e}") from None
    if label >= 0 and "cls" not in out:
        out["cls"] = label
    out["__key__"] = key
    out["__index__"] = index
    return out


def samples(batch, decoders=None, layout="hwc"):
    """Every sample of a decode="fields" batch, as dicts."""
    return [sample(batch, i, decoders, layout) for i in range(len(batch))]


def image_fields(decoders):
    """The image_fields a loader gets so that every field the "image"
    decoder would take is decoded in C: those with an image extension the
    C codecs read, and those decoders= maps to "image"; a field decoders=
    gives another decoder is left out."""
    spec = ["*"]
    for name, dec in (decoders or {}).items():
        if dec == "image":
            spec.append(name)
        elif name.rsplit(".", 1)[-1].lower() in ("jpg", "jpeg", "png", "webp"):
            spec.append("-" + name)
    return ",".join(spec)


class StackPool:
    """Memory that collate stacks batches into, kept from batch to batch so
    that a batch does not fault in (and the kernel zero) fresh pages: a
    64-image batch of 500x375 photos is 36 MB, which glibc maps anew each
    time (bench P4). The rule is the loader's own for its batch buffers: a
    buffer is reused only once nothing else refers to it. Every array and
    tensor made over a buffer holds it (numpy views hold the array that owns
    the memory, torch.from_numpy's tensor and its views hold the array they
    were made from), so its reference count tells: a batch the user still
    holds, or any view of it, is never written again. When every kept
    buffer is held, the batch gets fresh memory; up to `keep` buffers are
    kept (the others are freed with their last reference, as before)."""

    MIN_BYTES = 1 << 20  # smaller stacks: malloc reuses its own freed memory

    def __init__(self, keep=4):
        self.keep = keep
        self.bufs = []
        self._lock = threading.Lock()
        # held as the buffers are (an attribute here, a list there): its
        # count, read in the same pass as theirs, is that of a buffer only
        # the pool holds, whatever else (a tracer's frame copies) is about
        self._probe = [np.empty(1, np.uint8)]

    @staticmethod
    def _counts(bufs):
        return [sys.getrefcount(b) for b in bufs]

    def take(self, nbytes):
        """A uint8 array of at least nbytes that nothing else refers to.
        Under a lock: two threads collating at once (two passes of one
        dataset) never take the same buffer, since the one taken is
        referred to (by buf here) before the lock is let go."""
        with self._lock:
            counts = self._counts(self._probe + self.bufs)
            idle = [b for b, c in zip(self.bufs, counts[1:]) if c <= counts[0]]
            free = [b for b in idle if b.nbytes >= nbytes]
            if free:
                buf = min(free, key=lambda b: b.nbytes)
            else:
                buf = np.empty(nbytes, np.uint8)
                if len(self.bufs) < self.keep:
                    self.bufs.append(buf)
                elif idle:  # batches grew: the smallest idle buffer makes room
                    small = min(idle, key=lambda b: b.nbytes)
                    self.bufs = [b for b in self.bufs if b is not small] + [buf]
                    del small
            del free, idle
        return buf

    def stack(self, vals):
        """np.stack(vals) into pooled memory, each value's memory layout kept
        (CHW views of HWC pixels make a channels-last batch, as np.stack
        makes it); None where the values' layouts differ, or for small or
        non-numeric stacks (np.stack's then)."""
        v0 = vals[0]
        if v0.ndim == 0 or v0.dtype.kind not in "biufc" or \
                v0.nbytes * len(vals) < self.MIN_BYTES or \
                any(v.strides != v0.strides or v.shape != v0.shape or v.dtype != v0.dtype
                    for v in vals):
            return None
        order = sorted(range(v0.ndim), key=lambda a: -abs(v0.strides[a]))  # outermost first
        shape = (len(vals),) + tuple(v0.shape[a] for a in order)
        buf = self.take(int(np.prod(shape)) * v0.dtype.itemsize)
        mem = buf[:int(np.prod(shape)) * v0.dtype.itemsize].view(v0.dtype).reshape(shape)
        for i, v in enumerate(vals):
            mem[i] = v.transpose(order)
        back = [0] * v0.ndim
        for i, a in enumerate(order):
            back[a] = i + 1
        return mem.transpose([0] + back)

    def clear(self):
        self.bufs = []


def _np_stack(vals, pool):
    out = pool.stack(vals) if pool is not None else None
    return np.stack(vals) if out is None else out


def _stack(torch, vals, pool=None):
    """torch.stack of same-shape tensors, through numpy for CPU tensors:
    torch.stack of decoded images (CHW views of HWC buffers) is a byte-wise
    transpose on torch's intra-op threads, which on busy cores wait for
    each other (1.07 s for 64 500x375 images at 2 threads, 0.17 s at 1,
    bench P4); numpy's stack keeps each image's layout (the batch comes out
    channels-last, as the decoder's own views are) in one memcpy each,
    0.05 s. The values are the same either way."""
    if all(v.device.type == "cpu" and not v.requires_grad for v in vals):
        try:
            return torch.from_numpy(_np_stack([v.numpy() for v in vals], pool))
        except TypeError:  # a dtype numpy lacks (bfloat16)
            pass
    return torch.stack(vals)


def collate(items, pool=None):
    """A batch of dict samples as one dict: tensors of one shape stacked,
    ints into an int64 tensor, numpy arrays of one dtype and shape stacked
    (torch tensors where torch is installed), everything else (text,
    bytes, JSON, images of different sizes) a list. pool: a StackPool whose
    memory the stacks go into (reused once nothing refers to it), or None
    for fresh memory each time."""
    try:
        import torch
    except ImportError:
        torch = None
    out = {}
    keys = list(items[0]) if items else []
    for k in keys:
        vals = [it.get(k) for it in items]
        v0 = vals[0]
        if torch is not None and isinstance(v0, torch.Tensor) and \
                all(isinstance(v, torch.Tensor) and v.shape == v0.shape and v.dtype == v0.dtype
                    for v in vals):
            out[k] = _stack(torch, vals, pool)
        elif isinstance(v0, np.ndarray) and \
                all(isinstance(v, np.ndarray) and v.shape == v0.shape and v.dtype == v0.dtype
                    for v in vals):
            a = _np_stack(vals, pool)
            out[k] = torch.from_numpy(a) if torch is not None and a.dtype.kind in "biuf" and \
                a.dtype.byteorder in "=|<" else a
        elif k != "__key__" and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            out[k] = torch.tensor(vals, dtype=torch.int64) if torch is not None else \
                np.array(vals, dtype=np.int64)
        else:
            out[k] = vals
    return out
