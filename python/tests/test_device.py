"""stoker.torch's device= output and pinned batches under asynchronous
copies. Without a GPU: the argument checks, and the device path run
against a stand-in torch.cuda (streams, events, the current-stream stack)
and the stand-in libcudart (copies in flight, events), which check that a
batch is handed out only after its copy was issued one batch ahead, that
the consumer's stream waits for that copy's event, that the position
state_dict() reports is that of the batch handed out, and that no pinned
buffer is reused while a copy from it is in flight. With a GPU: every byte
of 10,000 batches after non-blocking copies, the GPU kept busy so that
copies queue behind its work."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import needs_torch

pytestmark = needs_torch

HERE = os.path.dirname(os.path.abspath(__file__))


def test_device_argument_errors(datasets):
    import torch
    import stoker.torch as st
    with pytest.raises(ValueError, match="CUDA devices only"):
        st.StokerDataset(datasets["npy"], 8, device="cpu")
    with pytest.raises(ValueError, match="is not a device"):
        st.StokerDataset(datasets["npy"], 8, device="gpu:x")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="torch finds no CUDA device"):
            st.StokerDataset(datasets["npy"], 8, device="cuda")
    assert st.StokerDataset(datasets["npy"], 8).device is None


STAND_IN = """
import contextlib, ctypes, json, sys, zlib
fake = ctypes.CDLL(sys.argv[1])   # soname libcudart.so: stoker takes it, torch keeps its own
fake.fake_copy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
fake.fake_is_pinned.argtypes = [ctypes.c_void_p]
import torch, stoker, stoker.torch as st

log = []
class Stream:
    n = 0x7000
    def __init__(self, device=None):
        Stream.n += 0x10
        self.cuda_stream = Stream.n
        self.device = torch.device("cuda", 0)
    def wait_event(self, ev):
        log.append(("wait", self.cuda_stream, ev.tag))
class Event:
    def record(self, s):
        self.tag = (s.cuda_stream, len(log))
        log.append(("record", s.cuda_stream, self.tag))
consumer = Stream()
stack = [consumer]
@contextlib.contextmanager
def stream(s):
    stack.append(s)
    try:
        yield
    finally:
        stack.pop()
cuda = torch.cuda
cuda.is_available = lambda: True
cuda.is_initialized = lambda: True
cuda.device_count = lambda: 1
cuda.current_device = lambda: 0
cuda.current_stream = lambda device=None: stack[-1]
cuda.stream = stream
cuda.device = lambda d: contextlib.nullcontext()
cuda.Stream = Stream
cuda.Event = Event
torch.Tensor.record_stream = lambda t, s: log.append(("record_stream", s.cuda_stream))

def copy_from(t):  # a copy in flight from now, where t's memory is a pinned batch
    s = t.untyped_storage()
    if fake.fake_is_pinned(ctypes.c_void_p(s.data_ptr())):
        fake.fake_copy(s.data_ptr(), s.nbytes(), stack[-1].cuda_stream)
        return s.data_ptr()

def to_device(x, dev):
    if isinstance(x, list) or x.dtype == torch.uint8:  # the inputs
        log.append(("copy", stack[-1].cuda_stream))
    if isinstance(x, list):  # views of one batch: its memory copied once
        if x:
            copy_from(x[0])
        return [t.clone() for t in x]
    copy_from(x)
    return x.clone()
st._to_device = to_device
"""


def _run_stand_in(tmp_path, body, timeout=120):
    lib = tmp_path / "libcudart.so"
    r = subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so", "-o", str(lib),
                        os.path.join(HERE, "fake_cudart.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    code = STAND_IN + textwrap.dedent(body)
    env = dict(os.environ)
    env.pop("LOCAL_RANK", None)
    r = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_device_output_against_stand_in_cuda(datasets, tmp_path):
    out = _run_stand_in(tmp_path, f"""
        src = {datasets['tfrecord']!r}  # samples of different sizes: views of the pinned batch
        def rows(x):
            return [zlib.crc32(bytes(r.numpy())) for r in (x if isinstance(x, list) else x)]
        ref = [(rows(x), y.tolist(), i.tolist())
               for x, y, i in st.StokerDataset(src, 8, seed=2, return_indices=True)]
        ref1 = [i.tolist() for x, y, i in st.StokerDataset(src, 8, seed=2, epoch=1,
                                                            return_indices=True)]
        ds = st.StokerDataset(src, 8, seed=2, return_indices=True, device="cuda:0",
                              threads=2, prefetch=2, prefetch_max=2)
        got, yields, states = [], [], []
        for n, (x, y, i) in enumerate(ds):
            yields.append(len(log))
            log.append(("yield", n))
            got.append((rows(x), y.tolist(), i.tolist()))
            states.append(ds.state_dict()["position"])
        # A pass left early: the position is that of the last batch handed
        # out, not of the one copied ahead, and the next pass goes on there.
        part = []
        for n, (x, y, i) in enumerate(ds):
            part.append(i.tolist())
            if n == 2:
                break
        pos = ds.state_dict()["position"]
        rest = [i.tolist() for x, y, i in ds]
        after = ds.state_dict()
        ds.close()  # every release reaches its loader first: each copy has completed
        print(json.dumps(dict(
            same=got == ref, n=len(got), states=states, pos=pos,
            resumed=part + rest == ref1,
            after=[after["epoch"], after["position"]],
            allocs=fake.fake_host_allocs(),
            log=[list(e) if not isinstance(e, tuple) else [str(v) for v in e] for e in log],
            copies=fake.fake_copies(), completed=fake.fake_copies_completed(),
            reuses=fake.fake_reuses_in_flight(), corrupt=fake.fake_corrupt())))
    """)
    import json
    res = json.loads(out)
    assert res["same"] and res["n"] == 25, res["n"]  # 200 samples, batch 8
    assert res["states"] == [8 * (k + 1) for k in range(25)], res["states"]
    assert res["pos"] == 24 and res["resumed"], res
    assert res["after"] == [2, 0], res["after"]  # epochs 0 and 1 (left early, then finished)
    assert res["allocs"] > 0  # the batches were pinned (by the stand-in runtime)
    assert res["reuses"] == 0 and res["corrupt"] == 0, res
    assert res["copies"] == res["completed"] == 25 + 3 + 1 + 22, res  # the one ahead at the break too

    log = res["log"]
    # Copies run on stoker's side stream, the consumer's stream waits for
    # each batch's event before it is handed out, and batch k+1's copy is
    # issued before batch k is handed out (double buffering).
    consumer = "28688"  # 0x7010: the first Stream made
    copies = [k for k, e in enumerate(log) if e[0] == "copy"]
    assert all(log[k][1] != consumer for k in copies)
    hand_outs = [k for k, e in enumerate(log) if e[0] == "yield"]
    for n, k in enumerate(hand_outs):
        assert log[k - 1][0] == "record_stream" and log[k - 1][1] == consumer, log[k - 3:k + 1]
        waits = [e for e in log[:k] if e[0] == "wait"]
        assert len(waits) == n + 1 and waits[-1][1] == consumer
        if n + 1 < len(hand_outs):
            assert sum(1 for c in copies if c < k) == n + 2, (n, log[k - 6:k + 1])


GPU_BODY = """
import os, sys, torch, numpy as np, stoker, stoker.torch as st
src, batches, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
REC = 65536
ids = {}
with stoker.Loader(src, 64, shuffle=False) as ld:  # global sample number -> the id written in it
    for b in ld:
        data = np.asarray(b.data)
        offs = np.frombuffer(memoryview(b.offsets).cast("B"), dtype=np.uint64)
        idx = np.frombuffer(memoryview(b.indices).cast("B"), dtype=np.uint64)
        for k in range(len(b)):
            ids[int(idx[k])] = int(data[int(offs[k]):int(offs[k]) + 8].view(np.int64)[0])
        del data, b
table = torch.tensor([ids[i] for i in range(len(ids))], dtype=torch.int64, device="cuda")
ar = torch.arange(REC, device="cuda")

def check(rows, idx, bad):
    # rows: (n, REC) uint8 on the GPU; every byte against what file idx holds
    want_id = table[idx]
    body = ((want_id[:, None] * 131 + ar[None, :] * 7) & 255).to(torch.uint8)
    body[:, :8] = want_id[:, None].contiguous().view(torch.uint8).view(-1, 8)
    bad += (rows != body).sum()

def u64(a):  # a batch's uint64 array as int64 numpy, a copy (pageable)
    return np.frombuffer(memoryview(a).cast("B"), dtype=np.uint64).astype(np.int64)

bad = torch.zeros((), dtype=torch.int64, device="cuda")
seen = 0
if mode == "pinned":   # the user's own copy: x.cuda(non_blocking=True), the batch dropped at once
    epochs = batches // (len(ids) // 8) + 1
    with stoker.Loader(src, 8, epochs=epochs, seed=1, threads=4, prefetch=2, prefetch_max=2,
                       pin_memory=True) as ld:
        assert ld.pinned, ld._pin_error
        for b in ld:
            x = torch.from_dlpack(b.data).cuda(non_blocking=True)
            offs = torch.from_numpy(u64(b.offsets)).cuda(non_blocking=True)
            idx = torch.from_numpy(u64(b.indices)).cuda(non_blocking=True)
            del b
            torch.cuda._sleep(200000)  # the GPU busy: copies queue behind its work
            check(x[offs[:, None] + ar[None, :]], idx, bad)
            seen += 1
            if seen == batches:
                break
else:                  # device="cuda": stoker copies on its own stream
    ds = st.StokerDataset(src, 8, seed=1, threads=4, prefetch=2, prefetch_max=2,
                          return_indices=True, device="cuda")
    while seen < batches:
        for x, y, idx in ds:
            assert x.is_cuda and idx.is_cuda and x.shape == (len(idx), REC)
            torch.cuda._sleep(200000)
            check(x, idx, bad)
            seen += 1
            if seen == batches:
                break
torch.cuda.synchronize()
print(seen, int(bad))
"""


@pytest.mark.parametrize("mode", ["pinned", "device"])
def test_gpu_every_byte_after_non_blocking_copies(tmp_path, mode):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False): checks every byte of "
                    "10,000 batches copied with non_blocking=True; run it on a GPU machine")
    import numpy as np
    src = tmp_path / "files"
    src.mkdir()
    for i in range(2000):  # file i: its id (i * 7919 + 3) in 8 bytes, then a pattern of the id
        fid = i * 7919 + 3
        body = ((fid * 131 + np.arange(65536) * 7) & 255).astype(np.uint8)
        body[:8] = np.frombuffer(np.int64(fid).tobytes(), dtype=np.uint8)
        (src / f"{i:05d}.bin").write_bytes(body.tobytes())
    r = subprocess.run([sys.executable, "-c", GPU_BODY, str(src), "10000", mode],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["10000", "0"], (r.stdout, r.stderr)
