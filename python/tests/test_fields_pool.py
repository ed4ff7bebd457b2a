"""fields.StackPool: collate stacks image batches into memory kept from
batch to batch (no fresh pages to fault in and zero each time, bench P4),
and never into memory that a batch handed out, or any view of it, still
refers to."""
import numpy as np

import stoker.fields as F
from conftest import needs_torch
from test_fields_image import triples  # noqa: F401 (the fixture)


def pictures(n, seed, h=40, w=30):
    """n CHW views of HWC pixels, as the loader's image fields come."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8).transpose(2, 0, 1) for _ in range(n)]


def small_pool(keep=2):
    pool = F.StackPool(keep)
    pool.MIN_BYTES = 0  # the test's stacks are small
    return pool


def addr(a):
    return a.__array_interface__["data"][0]


def in_pool(pool, a):
    return any(addr(b) <= addr(a) < addr(b) + b.nbytes for b in pool.bufs)


def test_stack_is_np_stack_with_its_layout():
    pool = small_pool()
    for vals in (pictures(5, 0), [np.ascontiguousarray(v) for v in pictures(5, 1)],
                 [np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-1]] * 3):
        want = np.stack(vals)
        got = pool.stack(vals)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.array_equal(got, want) and got.strides == want.strides
        del got
    mixed = pictures(2, 2) + [np.ascontiguousarray(pictures(1, 3)[0])]
    assert pool.stack(mixed) is None  # layouts differ: np.stack's
    assert F.StackPool().stack(pictures(3, 4)) is None  # below MIN_BYTES


def test_held_batches_and_their_views_are_never_overwritten():
    pool = small_pool(keep=2)
    kept, views, want = [], [], []
    for k in range(6):
        vals = pictures(4, 10 + k)
        a = pool.stack(vals)
        assert in_pool(pool, a) or len(pool.bufs) == pool.keep
        if k % 3 == 0:
            kept.append(a)  # the batch itself
            want.append(np.stack(vals))
        elif k % 3 == 1:
            views.append(a[1:, 2])  # only a view of it
            want.append(np.stack(vals)[1:, 2])
        del a
    for got, w in zip([kept[0], views[0], kept[1], views[1]], want):
        assert np.array_equal(got, w), "a batch still referred to was overwritten"


def test_memory_is_reused_once_nothing_refers_to_it():
    pool = small_pool(keep=2)
    a = pool.stack(pictures(4, 20))
    first = addr(a)
    b = pool.stack(pictures(4, 21))
    assert addr(b) != first  # a is held
    del a
    c = pool.stack(pictures(4, 22))
    assert addr(c) == first and len(pool.bufs) == 2
    assert np.array_equal(c, np.stack(pictures(4, 22)))
    assert np.array_equal(b, np.stack(pictures(4, 21)))


@needs_torch
def test_collate_tensors_and_their_views_hold_the_memory():
    import torch
    pool = small_pool(keep=2)
    items = [{"jpg": torch.from_numpy(np.ascontiguousarray(v.transpose(1, 2, 0))).permute(2, 0, 1),
              "cls": i} for i, v in enumerate(pictures(4, 30))]
    out = F.collate(items, pool)
    want = torch.stack([it["jpg"] for it in items])
    assert torch.equal(out["jpg"], want) and in_pool(pool, out["jpg"].numpy())
    assert out["jpg"].is_contiguous(memory_format=torch.channels_last)
    row = out["jpg"][2, 1]  # a torch view
    arr = out["jpg"].numpy()[3]  # a numpy view through the tensor
    del out
    for k in range(5):
        F.collate([{"jpg": torch.from_numpy(v)} for v in pictures(4, 40 + k)], pool)
    assert torch.equal(row, want[2, 1]) and np.array_equal(arr, want[3].numpy())


@needs_torch
def test_torch_dataset_reuses_memory_and_never_under_a_held_batch(triples):  # noqa: F811
    import torch

    import stoker.torch as st
    kw = dict(decode="fields", field="jpg,cls", world_size=1, rank=0, size=(256, 256),
              eval=False, seed=5)
    ds = st.StokerDataset(triples, 6, **kw)  # 6 x 3 x 256 x 256: above MIN_BYTES
    held, copies = [], []
    for _ in range(3):  # every batch held: each in memory of its own
        for item in ds:
            held.append(item)
            copies.append(item["jpg"].clone())
    assert len(held) == 6
    assert all(torch.equal(h["jpg"], c) for h, c in zip(held, copies))
    assert len({h["jpg"].data_ptr() for h in held}) == 6
    del held, item
    pool, n = ds._stacks(), 0
    for _ in range(3):  # batches dropped as the loop goes: the pool's memory
        for item in ds:
            assert in_pool(pool, item["jpg"].numpy())
            n += 1
    assert n == 6 and len(pool.bufs) <= pool.keep
    ds.close()


def test_values_of_other_shapes_or_dtypes_go_to_np_stack():
    pool = small_pool()
    a = np.zeros((1, 4), np.uint8)
    assert pool.stack([a, np.zeros((1, 4), np.int8)]) is None      # dtype differs
    b = np.zeros((3, 4), np.uint8)[:1]                               # same strides, shape differs
    assert pool.stack([np.zeros((3, 4), np.uint8), b]) is None
    assert not pool.bufs


def test_batches_that_grow_replace_the_smallest_idle_buffer():
    pool = small_pool(keep=2)
    for n in (2, 3):
        got = pool.stack(pictures(n, n))
        del got
    sizes = sorted(b.nbytes for b in pool.bufs)
    big = pool.stack(pictures(8, 9))       # larger than both kept buffers
    assert in_pool(pool, big)              # kept, in place of the smaller one
    kept = sorted(b.nbytes for b in pool.bufs)
    assert kept[0] == sizes[1] and kept[1] >= big.nbytes   # the smaller one went
    first = addr(big)
    del big
    again = pool.stack(pictures(8, 10))
    assert addr(again) == first            # and reused from then on
