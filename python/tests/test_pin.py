"""pin_memory=True with a CUDA runtime present: batch buffers come from
cudaMallocHost (here a stand-in libcudart with one device, since tests
never need a GPU), the data are the same as without pinning, nothing is
said, and every pinned buffer is freed when the loader closes."""
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
