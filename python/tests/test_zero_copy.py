"""Zero copy and batch lifetimes: numpy, memoryview and torch share the
loader's memory; a view kept after the loop moved on still holds its batch
(its buffer is not reused); dropped views return buffers to the pool, so
10,000 batches leave RSS bounded; holding every buffer raises instead of
hanging; close() with live batches keeps them valid."""
import gc

import numpy as np
import pytest

import stoker
from conftest import needs_torch, rss_kib, threads


def test_same_memory_numpy_memoryview(datasets):
    with stoker.Loader(datasets["tfrecord"], 16, shuffle=False) as ld:
        b = next(ld)
        a = np.asarray(b.data)
        m = memoryview(b.data)
        assert a.ctypes.data == b.data.data_ptr
        assert m.obj is not None and m.nbytes == b.data.nbytes
        assert np.frombuffer(m, dtype=np.uint8).ctypes.data == b.data.data_ptr
        labels = np.asarray(b.labels)
        assert labels.dtype == np.int32 and labels.shape == (16,)
        a[0] ^= 0xFF  # writes land in the batch itself
        assert m[0] == a[0]


@needs_torch
def test_same_memory_torch_dlpack(datasets):
    import torch
    with stoker.Loader(datasets["jpeg_tfrecord"], 8, decode="jpeg", size=32, layout="chw") as ld:
        b = next(ld)
        t = torch.from_dlpack(b.data)
        assert t.data_ptr() == b.data.data_ptr
        assert t.shape == (8, 3, 32, 32) and t.dtype == torch.uint8
        assert b.data.__dlpack_device__() == (1, 0)
        y = torch.from_dlpack(b.labels)
        assert y.dtype == torch.int32 and y.data_ptr() == b.labels.data_ptr


@needs_torch
def test_kept_tensor_holds_its_batch(datasets):
    import torch
    # A ring of at most 2 batches: without the reference, batch 0's buffer
    # would be refilled by the batches that follow.
    with stoker.Loader(datasets["tfrecord"], 10, shuffle=False, prefetch=1, prefetch_max=2) as ld:
        b = next(ld)
        kept = torch.from_dlpack(b.data)
        kept_labels = torch.from_dlpack(b.labels)
        snapshot, snap_labels = kept.clone(), kept_labels.clone()
        ptr = kept.data_ptr()
        del b
        gc.collect()
        assert ld.live_batches == 1  # the tensor alone holds it
        seen_ptrs = set()
        for b in ld:
            seen_ptrs.add(b.data.data_ptr)
            del b
        assert ptr not in seen_ptrs  # its buffer was never handed out again
        assert torch.equal(kept, snapshot) and torch.equal(kept_labels, snap_labels)
        del kept, kept_labels
        gc.collect()
        assert ld.live_batches == 0


def test_array_keeps_batch_and_loader_alive(datasets):
    ld = stoker.Loader(datasets["wds"], 8, shuffle=False)
    a = np.asarray(next(ld).data)
    first = bytes(a[:64])
    ld.close()  # batches still viewed stay valid
    assert ld.closed
    with pytest.raises(ValueError, match="closed"):
        next(ld)
    assert bytes(a[:64]) == first
    del ld
    gc.collect()
    assert bytes(a[:64]) == first  # the view alone keeps the memory
    del a
    gc.collect()


def test_ten_thousand_batches_rss_bounded(datasets):
    """Views made and dropped every batch: memory returns to the pool."""
    torch = None
    try:
        import torch
    except ImportError:
        pass
    ld = stoker.Loader(datasets["tfrecord"], 2, shuffle=True, epochs=100, threads=1)
    rss = []
    n = 0
    for b in ld:
        a = np.asarray(b.data)
        m = memoryview(b.labels)
        if torch is not None:
            t = torch.from_dlpack(b.data)
            assert t.data_ptr() == a.ctypes.data
            del t
        assert a.nbytes >= b.nbytes and m.nbytes == 4 * len(b)
        del a, m, b
        n += 1
        if n in (1000, 10000):
            gc.collect()
            rss.append(rss_kib())
    ld.close()
    assert n == 10000  # 200 samples / 2 x 100 epochs
    # No batch leaked: a leak of one 6 KiB batch per step would be 50+ MiB.
    assert rss[1] - rss[0] < 16 * 1024, rss


def test_holding_every_buffer_raises_instead_of_hanging(datasets):
    ld = stoker.Loader(datasets["tfrecord"], 4, shuffle=False, prefetch=1, prefetch_max=2)
    held = []
    with pytest.raises(stoker.BusyError, match="held by a live batch"):
        for b in ld:
            held.append(b)
    assert 2 <= len(held) <= 4
    del held[:]  # releasing them lets the loader go on
    gc.collect()
    rest = sum(len(b) for b in ld)
    assert rest > 0
    ld.close()


def test_close_with_live_batches_then_threads_end(datasets):
    base = threads()
    ld = stoker.Loader(datasets["tfrecord"], 8, threads=2)
    b = next(ld)
    assert threads() > base
    ld.close()
    data = bytes(np.asarray(b.data)[:32])
    assert len(data) == 32
    del b, ld
    gc.collect()
    assert threads() == base


def test_dlpack_misuse_is_an_error_not_a_crash(datasets):
    with stoker.Loader(datasets["tfrecord"], 4) as ld:
        b = next(ld)
        with pytest.raises(BufferError):
            b.data.__dlpack__(stream=7)
        with pytest.raises(IndexError):
            b[4]
        cap = b.data.__dlpack__()  # an unconsumed capsule frees itself
        del cap
        assert len(b) == 4 and b[3].shape == (int(np.asarray(b.lengths)[3]),)


def test_mapped_batch_is_writable_and_file_unchanged(tmp_path):
    # Samples of 8 MiB or more are mapped from the page cache (the mmap
    # engine): the arrays still hold the files' bytes, and writing into a
    # batch, as any in-place transform does, changes the batch, never the
    # file (the mapping is private: a written page is copied).
    d = tmp_path / "big"
    d.mkdir()
    want = []
    for i in range(3):
        x = np.random.default_rng(i).integers(0, 255, size=(9 << 20) + 4099 * i, dtype=np.uint8)
        np.save(d / f"s{i}.npy", x)
        want.append(x)
    with stoker.Loader(str(d), 3, shuffle=False, decode="npy") as ld:
        assert ld.engine == "mmap"
        b = next(ld)
        for i in range(3):
            s = np.asarray(b[i])
            assert np.array_equal(s, want[int(np.asarray(b.indices)[i])])
            s[:4096] = 7
            assert (np.asarray(b[i])[:4096] == 7).all()
        whole = np.asarray(b.data)
        assert whole.sum(dtype=np.uint64) > 0  # the whole span, gaps included, reads
    for i in range(3):
        assert np.array_equal(np.load(d / f"s{i}.npy"), want[i])
