"""Build of the _stoker extension, with libstoker inside it.

Where libstoker comes from, in this order:
  1. an archive from `make` (build/libstoker.a; STOKER_LIB names another),
     linked statically;
  2. the library's sources, compiled into the extension: those of the
     repository this file sits in, or the copy an sdist carries
     (libstoker/ beside this file; `python setup.py sdist` puts it there);
  3. an installed libstoker, through `pkg-config stoker`.
So `pip install --no-build-isolation ./python` works on a fresh clone with
only the Debian -dev packages of scripts/install-deps, no `make` first.
libstoker's own dependencies come from pkg-config, by the names of the
Makefile's PKGS line (the one list of them), and those without a
pkg-config file from its SYSLIBS line (an sdist records both in
libstoker/). STOKER_ROOT names the repository when this file is
elsewhere; STOKER_FROM_SOURCE=1 compiles the sources even where an archive
exists."""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("STOKER_ROOT") or os.path.dirname(HERE)
VENDOR = os.path.join(HERE, "libstoker")
LIB = os.environ.get("STOKER_LIB") or os.path.join(ROOT, "build", "libstoker.a")
# Built only by the CLI and tests (Open MPI); never part of the library.
NOT_IN_LIB = {os.path.join("src", "bench", "mpi.c")}


def source_tree():
    """The directory holding libstoker's src/ and include/: the sdist's
    copy, else the repository; None when neither is here."""
    for base in (VENDOR, ROOT):
        if os.path.isdir(os.path.join(base, "src", "loader")) and \
                os.path.isfile(os.path.join(base, "include", "stoker", "stoker.h")):
            return base
    return None


def lib_sources(base):
    """The library's .c files, as paths relative to this directory
    (setuptools refuses absolute ones)."""
    out = []
    for p in sorted(glob.glob(os.path.join(base, "src", "*", "*.c"))):
        if os.path.relpath(p, base) not in NOT_IN_LIB:
            out.append(os.path.relpath(p, HERE))
    return out


def makefile_line(name):
    """A list from the repository's Makefile (`NAME := ...`), or the sdist's
    record of it in libstoker/NAME (STOKER_NAME overrides)."""
    if os.environ.get("STOKER_" + name):
        return os.environ["STOKER_" + name].split()
    try:
        with open(os.path.join(VENDOR, name)) as f:
            return f.read().split()
    except OSError:
        pass
    try:
        with open(os.path.join(ROOT, "Makefile")) as f:
            for line in f:
                if line.startswith(name) and ":=" in line and line.split(":=")[0].strip() == name:
                    return line.split(":=", 1)[1].split()
    except OSError:
        pass
    raise SystemExit("stoker: cannot read the %s line of %s/Makefile; set STOKER_ROOT to the "
                     "repository (or STOKER_%s)" % (name, ROOT, name))


def makefile_pkgs():
    """The pkg-config names of libstoker's dependencies: the PKGS line."""
    return makefile_line("PKGS")


def makefile_syslibs():
    """The libraries with no pkg-config file, and the system's: SYSLIBS."""
    return makefile_line("SYSLIBS")


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise SystemExit(f"stoker: pkg-config {' '.join(args)} failed: {detail.strip()}; "
                         "install libstoker's build dependencies (scripts/install-deps build "
                         "in the repository lists them)")
    return shlex.split(out.stdout)


EXT_FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
             "-Wno-missing-field-initializers", "-Wno-cast-function-type", "-fvisibility=hidden"]
# The library's sources as the Makefile builds them, less -Werror: another
# compiler's new warnings must not stop a user's install.
LIB_FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-pthread", "-fvisibility=hidden", "-Wall",
             "-Wextra", "-Wno-missing-field-initializers"]

# The extension's own files (src/binding.h says which idea each holds),
# compiled with EXT_FLAGS; the library's with LIB_FLAGS.
BINDING = sorted(os.path.join("src", os.path.basename(p))
                 for p in glob.glob(os.path.join(HERE, "src", "*.c")))
BINDING_HEADERS = sorted(os.path.join("src", os.path.basename(p))
                         for p in glob.glob(os.path.join(HERE, "src", "*.h")))
if not BINDING:
    raise SystemExit("stoker: no extension sources in %s/src" % HERE)

tree = source_tree()
sources, include_dirs, extra_objects, compile_args = list(BINDING), [], [], EXT_FLAGS
from_source = os.environ.get("STOKER_FROM_SOURCE") == "1"
if "sdist" in sys.argv[1:]:
    libs = []  # the archive carries the sources; nothing is built
elif os.path.exists(LIB) and not from_source:
    include_dirs = [os.path.join(ROOT, "include")]
    extra_objects = [LIB]
    libs = pkg_config("--libs", *makefile_pkgs()) + makefile_syslibs()
elif tree:
    pkgs = makefile_pkgs()
    sources += lib_sources(tree)
    include_dirs = [os.path.join(tree, "include")] + \
        [f[2:] for f in pkg_config("--cflags-only-I", *pkgs)]
    libs = pkg_config("--libs", *pkgs) + makefile_syslibs()
else:
    # its Requires bring the dependencies; the shared library links the rest
    libs = pkg_config("--libs", "stoker") + ["-lm", "-ldl", "-pthread"]
    include_dirs = [f[2:] for f in pkg_config("--cflags", "stoker") if f.startswith("-I")]


class BuildExt(build_ext):
    """The extension's own file with -Werror, the library's without, all of
    them compiled at once on every core (distutils compiles one by one)."""

    def build_extension(self, ext):
        cc = self.compiler

        def compile_all(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                        extra_preargs=None, extra_postargs=None, depends=None):
            macros, objects, extra_postargs, pp_opts, build = cc._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = cc._get_cc_args(pp_opts, debug, extra_preargs)

            def one(obj):
                src, src_ext = build[obj]
                flags = extra_postargs if os.path.normpath(src) in BINDING else LIB_FLAGS
                cc._compile(obj, src, src_ext, cc_args, flags, pp_opts)

            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                list(pool.map(one, [o for o in objects if o in build]))
            return objects

        orig, cc.compile = cc.compile, compile_all
        try:
            super().build_extension(ext)
        finally:
            cc.compile = orig


class Sdist(sdist):
    """An sdist that builds without the repository: libstoker's sources and
    its PKGS and SYSLIBS lines go into libstoker/ for the archive, then are
    removed."""

    def run(self):
        if os.path.isdir(VENDOR) or not tree or tree == VENDOR:
            return super().run()
        pkgs, syslibs = makefile_pkgs(), makefile_syslibs()
        try:
            for d in ("src", "include"):
                shutil.copytree(os.path.join(tree, d), os.path.join(VENDOR, d),
                                ignore=shutil.ignore_patterns("*.o", "*.d"))
            with open(os.path.join(VENDOR, "PKGS"), "w") as f:
                f.write(" ".join(pkgs) + "\n")
            with open(os.path.join(VENDOR, "SYSLIBS"), "w") as f:
                f.write(" ".join(syslibs) + "\n")
            super().run()
        finally:
            shutil.rmtree(VENDOR, ignore_errors=True)


ext = Extension(
    "stoker._stoker",
    sources=sources,
    include_dirs=include_dirs + [os.path.join(HERE, "src")],
    extra_objects=extra_objects,
    extra_compile_args=compile_args,
    extra_link_args=libs,
    depends=BINDING_HEADERS + [LIB] if extra_objects else BINDING_HEADERS,
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt, "sdist": Sdist})
