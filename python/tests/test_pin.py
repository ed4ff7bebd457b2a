"""pin_memory=True with a CUDA runtime present: batch buffers come from
cudaMallocHost (here a stand-in libcudart with one device, since tests
never need a GPU), the data are the same as without pinning, nothing is
said, and every pinned buffer is freed when the loader closes."""
import json
import os
import subprocess
import sys
import textwrap


def test_pin_memory_uses_the_cuda_runtime(datasets, tmp_path):
    lib = tmp_path / "libcudart.so"
    r = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib),
                        os.path.join(os.path.dirname(__file__), "fake_cudart.c")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    code = textwrap.dedent(f"""
        import ctypes, warnings, zlib, numpy as np, stoker
        def crcs(**kw):
            out = []
            with stoker.Loader({datasets['jpeg_wds']!r}, 8, decode="jpeg", size=32, seed=4, **kw) as ld:
                pinned = ld.pinned
                for b in ld:
                    out.append(zlib.crc32(np.asarray(b.data).tobytes()))
            return pinned, out
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            pinned, a = crcs(pin_memory=True)
        _, b = crcs()
        fake = ctypes.CDLL({str(lib)!r})
        print(pinned, a == b, len(a), len(w), fake.fake_host_allocs() > 0,
              fake.fake_host_allocs() == fake.fake_host_frees())
    """)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "6", "0", "True", "True"], r.stdout


def _fake_lib(tmp_path):
    lib = tmp_path / "libcudart.so"
    r = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib),
                        os.path.join(os.path.dirname(__file__), "fake_cudart.c")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return lib


def test_pinned_buffer_is_not_reused_before_its_copies_complete(datasets, tmp_path):
    """The stand-in runtime models asynchronous copies: each batch is
    "copied" from its buffer (as x.cuda(non_blocking=True) would) and then
    released at once; a copy completes only when an event recorded after
    it on its stream completes, 2 ms later. Over 400 batches through two
    buffers, every buffer handed out again must have had its earlier copy
    completed first (by the log of calls, in order), and no copy may see
    its bytes change while in flight. Once with stoker.Loader's own release
    stream (no torch CUDA here: the legacy default stream), once with a
    stream given, as torch's current stream would be."""
    lib = _fake_lib(tmp_path)
    log = tmp_path / "calls.log"
    code = textwrap.dedent(f"""
        import ctypes, json, zlib, numpy as np, stoker
        fake = ctypes.CDLL({str(lib)!r})
        fake.fake_copy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        def run(stream, pin=True):
            ptrs, crcs = [], []
            with stoker.Loader({datasets['npy']!r}, 4,
                               epochs=4, seed=3, prefetch=2, prefetch_max=2, threads=2,
                               pin_memory=pin) as ld:
                assert ld.pinned == pin
                if stream is not None:
                    ld._set_release_stream(lambda: (stream, -1))
                for b in ld:
                    a = np.asarray(b.data)
                    crcs.append(zlib.crc32(a.tobytes()))
                    if pin:
                        fake.fake_copy(a.ctypes.data, a.nbytes, stream or 0)
                    ptrs.append(a.ctypes.data)
                    del a, b
            return ptrs, crcs
        p0, c0 = run(None)
        p1, c1 = run(0x5000)
        _, ref = run(None, pin=False)
        print(json.dumps(dict(
            batches=[len(p0), len(p1)], distinct=[len(set(p0)), len(set(p1))],
            same=[c0 == ref, c1 == ref], copies=fake.fake_copies(),
            completed=fake.fake_copies_completed(), reuses=fake.fake_reuses_in_flight(),
            corrupt=fake.fake_corrupt(), waits=fake.fake_waits(), not_ready=fake.fake_not_ready(),
            allocs=fake.fake_host_allocs(), frees=fake.fake_host_frees())))
    """)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), FAKE_CUDA_LOG=str(log))
    env.pop("LOCAL_RANK", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["batches"] == [200, 200], res
    assert all(d < 10 for d in res["distinct"]), res  # buffers were reused, many times over
    assert res["same"] == [True, True], res
    assert res["reuses"] == 0 and res["corrupt"] == 0, res
    assert res["copies"] == 400 and res["completed"] == 400, res
    assert res["waits"] > 0, res  # some releases had to wait for their event
    assert res["allocs"] == res["frees"] > 0, res

    # The same, from the order of calls: between two copies from one
    # buffer, the first was completed by an event recorded after it.
    in_flight = {}       # buffer -> the log line of its copy in flight
    copied = set()       # buffers copied from before
    records = set()      # events recorded
    streams = set()      # the streams they were recorded on
    reused = 0
    for line in log.read_text().splitlines():
        n, op, *args = line.split()
        if op == "copy":
            buf = args[0]
            assert buf not in in_flight, \
                f"line {n}: {buf} copied again while its copy of line {in_flight[buf]} is in flight"
            reused += buf in copied
            copied.add(buf)
            in_flight[buf] = n
        elif op == "record":
            records.add(args[0])
            streams.add(args[1])
        elif op == "complete":
            assert args[1] in records, f"line {n}: completed by an event never recorded"
            del in_flight[args[0]]
    assert not in_flight
    assert reused >= 390, reused
    assert streams == {"(nil)", "0x5000"}, streams


def test_pinned_memory_is_made_on_the_ranks_device(datasets, tmp_path):
    """Loader threads never choose a CUDA device, and the runtime makes its
    context on the current one, device 0 by default: every rank of a node
    would then hold a context on GPU 0. With two devices, LOCAL_RANK=1
    (and 3, modulo the devices) puts every pinned buffer, and every context
    the process makes, on device 1; without LOCAL_RANK, device 0."""
    lib = _fake_lib(tmp_path)
    code = textwrap.dedent(f"""
        import ctypes, json, stoker
        fake = ctypes.CDLL({str(lib)!r})
        fake.fake_host_allocs_on.argtypes = [ctypes.c_int]
        with stoker.Loader({datasets['npy']!r}, 8, epochs=2, threads=2, pin_memory=True) as ld:
            n = sum(1 for b in ld)
            pinned = ld.pinned
        print(json.dumps(dict(pinned=pinned, batches=n, allocs=fake.fake_host_allocs(),
                              on=[fake.fake_host_allocs_on(0), fake.fake_host_allocs_on(1)],
                              contexts=fake.fake_contexts())))
    """)
    for local_rank, dev in (("1", 1), ("3", 1), (None, 0)):
        env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), FAKE_CUDA_DEVICES="2")
        env.pop("LOCAL_RANK", None)
        if local_rank:
            env["LOCAL_RANK"] = local_rank
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["pinned"] and res["batches"] == 50 and res["allocs"] > 0, res
        assert res["on"][dev] == res["allocs"] and res["on"][1 - dev] == 0, (local_rank, res)
        assert res["contexts"] == 1 << dev, (local_rank, res)  # none on the other device
