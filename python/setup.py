"""Build of the _stoker extension. It links libstoker statically
(build/libstoker.a, made by `make`), so the installed package needs no
LD_LIBRARY_PATH; libstoker's own dependencies come from pkg-config, by
the names of the Makefile's PKGS line (the one list of them). STOKER_ROOT (the repository) and
STOKER_LIB (the archive) override where they are looked for; with an
installed libstoker and no archive, `pkg-config stoker` is used instead."""
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("STOKER_ROOT") or os.path.dirname(HERE)
LIB = os.environ.get("STOKER_LIB") or os.path.join(ROOT, "build", "libstoker.a")


def makefile_pkgs():
    """The pkg-config names of libstoker's dependencies: the PKGS line of
    the repository's Makefile (STOKER_PKGS overrides)."""
    if os.environ.get("STOKER_PKGS"):
        return os.environ["STOKER_PKGS"].split()
    try:
        with open(os.path.join(ROOT, "Makefile")) as f:
            for line in f:
                if line.startswith("PKGS") and ":=" in line:
                    return line.split(":=", 1)[1].split()
    except OSError:
        pass
    raise SystemExit("stoker: cannot read the PKGS line of %s/Makefile; set STOKER_ROOT "
                     "to the repository (or STOKER_PKGS to libstoker's pkg-config names)" % ROOT)



def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"stoker: pkg-config {' '.join(args)} failed ({e}); "
                         "run `make` in the repository first (it installs the build packages)")
    return shlex.split(out.stdout)


if os.path.exists(LIB):
    include_dirs = [os.path.join(ROOT, "include")]
    extra_objects = [LIB]
    libs = pkg_config("--libs", *makefile_pkgs())
else:
    include_dirs = []
    extra_objects = []
    libs = pkg_config("--libs", "stoker")  # its Requires bring the dependencies
    include_dirs = [f[2:] for f in pkg_config("--cflags", "stoker") if f.startswith("-I")]

ext = Extension(
    "stoker._stoker",
    sources=["src/_stoker.c"],
    include_dirs=include_dirs + [os.path.join(HERE, "src")],
    extra_objects=extra_objects,
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type",
                        "-fvisibility=hidden"],
    extra_link_args=libs + ["-lm", "-ldl", "-pthread"],
    depends=["src/dlpack.h", LIB] if extra_objects else ["src/dlpack.h"],
)

setup(ext_modules=[ext])
