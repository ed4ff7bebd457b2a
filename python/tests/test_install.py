"""The C library installs like one: `make install PREFIX=...` puts the
shared and static library, the headers and stoker.pc in place; the README's
C example (c_ref.c) builds against the installed copy with pkg-config, both
shared and static; the shared library exports only the public API and does
not need MPI."""
import os
import re
import subprocess

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["make", "-C", ROOT, "--no-print-directory", "install", f"PREFIX={p}"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return str(p)


def pkg(prefix, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    r = subprocess.run(["pkg-config", *args, "stoker"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_install_layout(prefix):
    for f in ("lib/libstoker.a", "lib/libstoker.so", "lib/libstoker.so.0", "lib/pkgconfig/stoker.pc",
              "include/stoker/stoker.h", "include/stoker/export.h", "bin/stoker"):
        assert os.path.exists(os.path.join(prefix, f)), f
    assert f"-I{prefix}/include" in pkg(prefix, "--cflags")
    assert f"-L{prefix}/lib" in pkg(prefix, "--libs")
    assert "-lcurl" in pkg(prefix, "--static", "--libs")


def build_ref(prefix, out, static):
    flags = pkg(prefix, "--cflags")
    if static:
        # libstoker.a itself, with its dependencies' shared libraries (Debian
        # ships no static libcurl dependencies): the ones stoker.pc names.
        reqs = [r.split()[0] for r in pkg(prefix, "--print-requires-private") if r[0].isalpha()]
        deps = subprocess.run(["pkg-config", "--libs", *reqs], capture_output=True, text=True,
                              check=True).stdout.split()
        flags += [os.path.join(prefix, "lib", "libstoker.a")] + deps + ["-lm", "-ldl", "-pthread"]
    else:
        flags += pkg(prefix, "--libs")
    r = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-o", out,
                        os.path.join(os.path.dirname(__file__), "c_ref.c")] + flags + ["-lz"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("static", [False, True], ids=["shared", "static"])
def test_c_example_builds_with_pkg_config(prefix, datasets, tmp_path, static):
    exe = build_ref(prefix, str(tmp_path / "c_ref"), static)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(prefix, "lib"))
    r = subprocess.run([exe, datasets["tfrecord"], "32", "none", "0", "raw", "u8", "hwc", "0", "0", "1"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 7  # 200 samples in batches of 32
    assert sum(int(ln.split()[1]) for ln in lines) == 200
    if not static:
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True, env=env).stdout
        assert os.path.join(prefix, "lib", "libstoker.so.0") in ldd


def test_shared_library_exports_only_the_public_api(prefix):
    nm = subprocess.run(["nm", "-D", "--defined-only", os.path.join(prefix, "lib", "libstoker.so")],
                        capture_output=True, text=True, check=True).stdout
    names = [ln.split()[-1] for ln in nm.splitlines() if ln.strip()]
    assert "stk_loader_open" in names and "stk_log_set_callback" in names
    assert "stk_loader_opts_init_sized" in names
    leaked = [n for n in names if not re.match(r"stk_[a-z]", n)]
    assert leaked == [], f"symbols outside the public API: {leaked[:10]}"
    # Nothing internal (stk__*) and nothing of MPI.
    ldd = subprocess.run(["ldd", os.path.join(prefix, "lib", "libstoker.so")], capture_output=True,
                         text=True).stdout
    assert "libmpi" not in ldd


def test_every_public_declaration_is_exported(root):
    """python/tools/apply_export.py has been run on every header: it would
    change nothing."""
    import importlib.util
    import glob
    spec = importlib.util.spec_from_file_location("apply_export", os.path.join(root, "python", "tools", "apply_export.py"))
    src = open(spec.origin).read().split("\nfor path in sys.argv")[0]
    ns = {}
    exec(compile(src, spec.origin, "exec"), ns)
    for h in glob.glob(os.path.join(root, "include", "stoker", "*.h")):
        text = open(h).read()
        assert ns["process"](text) == text, f"{h}: a declaration lacks STK_EXPORT (run python/tools/apply_export.py)"


# ---- the Python package from source: no `make` first --------------------------

@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """A clone of this repository as a user gets it: no build/ in it."""
    d = tmp_path_factory.mktemp("clone") / "stoker"
    r = subprocess.run(["git", "clone", "-q", ROOT, str(d)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(d / "build")
    return d


def pip_install(src, target, env=None):
    import sys
    e = dict(os.environ, **(env or {}))
    e.pop("STOKER_LIB", None)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                        "--no-index", "--target", str(target), str(src)],
                       capture_output=True, text=True, env=e, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def loads_from(target, where):
    import sys
    code = ("import stoker, tempfile, os\n"
            "assert stoker.__file__.startswith(%r), stoker.__file__\n"
            "d = tempfile.mkdtemp()\n"
            "stoker.gen(os.path.join(d, 'x'), 50, size=32, classes=3, seed=1)\n"
            "with stoker.Loader(os.path.join(d, 'x'), 16) as ld:\n"
            "    print(sum(len(b) for b in ld))\n") % str(target)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=where,
                       env=dict(os.environ, PYTHONPATH=str(target)), timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "50", r.stdout + r.stderr


def test_pip_install_from_a_fresh_clone(fresh_clone, tmp_path):
    # The README's Python command on a clone that never ran make: setup.py
    # compiles libstoker's sources into the extension.
    pip_install(fresh_clone / "python", tmp_path / "site", {"STOKER_ROOT": ""})
    loads_from(tmp_path / "site", tmp_path)


def test_sdist_builds_without_the_repository(fresh_clone, tmp_path):
    # The sdist carries libstoker's sources and its dependency list, and
    # builds with nothing of the repository around it.
    import sys
    import tarfile
    r = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")],
                       cwd=fresh_clone / "python", capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (sd,) = list((tmp_path / "dist").glob("stoker-*.tar.gz"))
    with tarfile.open(sd) as t:
        names = t.getnames()
        t.extractall(tmp_path / "x")
    top = names[0].split("/")[0]
    assert f"{top}/libstoker/PKGS" in names and f"{top}/libstoker/include/stoker/stoker.h" in names
    assert any(n.startswith(f"{top}/libstoker/src/loader/") for n in names)
    assert not os.path.exists(fresh_clone / "python" / "libstoker")  # removed after packing
    pip_install(tmp_path / "x" / top, tmp_path / "site", {"STOKER_ROOT": ""})
    loads_from(tmp_path / "site", tmp_path)
