# stoker: libstoker (static and shared), the stoker CLI, tests, fuzzers and
# benchmarks. `make` installs missing Debian packages first (scripts/
# install-deps), so a fresh Debian 12 machine needs nothing else.

BUILD   ?= build
CC      ?= cc
OPT     ?= -O2
SAN     ?=
PKGS    := liburing libturbojpeg libjpeg spng libwebp zlib libdeflate libisal libcurl qhull_r libmicrohttpd libzstd yaml-0.1 libcrypto libxcrypt
V       ?= 0

DEPS_OK := $(BUILD)/.deps-ok
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

# MPI (`stoker bench` across processes and hosts) is optional: found through
# Open MPI's pkg-config file (Debian's libopenmpi-dev, which `make test`
# installs); MPI=0 builds without it. Only src/bench/mpi.c sees mpi.h; the
# flags are recorded so that a change (MPI installed) rebuilds it. mpi.c is
# not part of libstoker: it is its own small archive (libstoker-mpi.a) that
# only the CLI and the test program link, so a program (or the Python
# extension) linking libstoker never pulls in Open MPI.
MPI ?= $(if $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1),1,0)
ifeq ($(MPI),1)
MPI_CFLAGS := -DSTK_HAVE_MPI $(patsubst -I%,-isystem %,$(shell pkg-config --cflags ompi-c))
MPI_LIBS   := $(shell pkg-config --libs ompi-c)
endif

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers
CFLAGS  += -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -fPIC -pthread -Iinclude -MMD -MP
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif
# Libraries without a pkg-config file (Debian's GLPK has none) and the
# system's: the one list, which stoker.pc and python/setup.py also read.
SYSLIBS := -lglpk -lm -ldl -pthread
LDLIBS  += $(PKG_LIBS) $(SYSLIBS)

MPI_SRC  := src/bench/mpi.c
LIB_SRC  := $(filter-out $(MPI_SRC),$(sort $(wildcard src/*/*.c)))
CLI_SRC  := $(sort $(wildcard cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

MPI_OBJ  := $(MPI_SRC:%.c=$(BUILD)/obj/%.o)
STATIC   := $(BUILD)/libstoker.a
MPILIB   := $(BUILD)/libstoker-mpi.a
SOVER    := 0
SHARED   := $(BUILD)/libstoker.so
CLI      := $(BUILD)/stoker
TESTBIN  := $(BUILD)/stoker-test

.PHONY: FORCE bench-build all deps test test-c test-python test-python-asan test-asan test-tsan check fuzz fuzz-build bench clean format install python layers

all: $(STATIC) $(SHARED) $(CLI)

$(DEPS_OK): scripts/install-deps
	@mkdir -p $(BUILD)
	@./scripts/install-deps build
	@touch $@

deps: $(DEPS_OK)

$(BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(if $(filter 0,$(V)),@echo "  CC  $<";)$(CC) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

MPI_STAMP := $(BUILD)/mpi.flags
$(MPI_STAMP): FORCE
	@mkdir -p $(BUILD)
	@echo '$(MPI_CFLAGS) $(MPI_LIBS)' | cmp -s - $@ || echo '$(MPI_CFLAGS) $(MPI_LIBS)' > $@
$(BUILD)/obj/src/bench/mpi.o: $(MPI_STAMP)
$(BUILD)/obj/src/bench/mpi.o: CFLAGS += $(MPI_CFLAGS)
FORCE:

# The library exports only its public API: everything under src/ is hidden
# unless include/stoker/ marks it STK_EXPORT (include/stoker/export.h).
$(BUILD)/obj/src/%.o: CFLAGS += -fvisibility=hidden

$(STATIC): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(MPILIB): $(MPI_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libstoker.so.$(SOVER) -o $@ $^ $(LDLIBS)

$(CLI): $(CLI_OBJ) $(MPILIB) $(STATIC)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(MPILIB) $(STATIC) $(LDLIBS) $(MPI_LIBS)

# The test registry is generated from the TEST(name) lines of tests/*.c.
$(BUILD)/tests_list.h: $(TEST_SRC)
	@mkdir -p $(BUILD)
	@grep -ho '^TEST([a-z0-9_]*)' $(TEST_SRC) | sed 's/^TEST(\(.*\))/X(\1)/' > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/tests/runner.o: $(BUILD)/tests_list.h
$(BUILD)/obj/tests/runner.o: CFLAGS += -I$(BUILD)

$(TESTBIN): $(TEST_OBJ) $(MPILIB) $(STATIC)
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(MPILIB) $(STATIC) $(LDLIBS) $(MPI_LIBS)

# The fake NVML the watch tests load in place of libnvidia-ml.so.1 (a
# scenario file drives it: tests/tools/fakenvml/README.md).
FAKENVML := $(BUILD)/fakenvml/libnvidia-ml.so.1
$(FAKENVML): tests/tools/fakenvml/fakenvml.c src/gpu/nvml_abi.h
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -g -O1 $(WARN) -o $@ $<

# The header check: stoker declares the NVML and CUDA runtime ABI it
# dlopens itself (src/gpu/nvml_abi.h, src/bench/cuda_abi.h), and
# tests/tools/check-headers.c compares those declarations with the
# toolkit's nvml.h and cuda_runtime_api.h at compile time. Where either
# header is found, `make` builds it and a mismatch fails the build; where
# neither is, the build goes on (the test abi_headers_match then skips).
# The toolkit is CUDA_HOME, else /usr/local/cuda, else the one whose nvcc
# is on the PATH; nvml.h is also looked for in /usr/include and in the
# venv (PyPI's nvidia-nvml-dev). CUDA_INC= or NVML_INC= (empty) leaves one
# out. `make check-headers` runs the check and says where it looked.
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda) $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)))
HDR_DIRS  := $(strip $(if $(CUDA_HOME),$(CUDA_HOME)/include $(wildcard $(CUDA_HOME)/targets/*/include)))
HDR_VENV  := $(or $(VENV),.venv)/lib/python3*/site-packages/nvidia/cu*/include
ifeq ($(origin CUDA_INC),undefined)
CUDA_INC  := $(patsubst %/cuda_runtime_api.h,%,$(firstword $(wildcard $(HDR_DIRS:%=%/cuda_runtime_api.h))))
endif
ifeq ($(origin NVML_INC),undefined)
NVML_INC  := $(patsubst %/nvml.h,%,$(firstword $(wildcard $(HDR_DIRS:%=%/nvml.h) /usr/include/nvml.h $(HDR_VENV)/nvml.h)))
endif
HDR_FLAGS := $(strip $(if $(NVML_INC),-DSTK_CHECK_NVML=1 -isystem $(NVML_INC)) $(if $(CUDA_INC),-DSTK_CHECK_CUDA=1 -isystem $(CUDA_INC)))
HDR_SRC   ?= tests/tools/check-headers.c
HDR_OBJ   := $(BUILD)/obj/tests/tools/check-headers.o
HDR_STAMP := $(BUILD)/check-headers.flags
HDR_FAIL  := { echo "check-headers: stoker's declarations (src/gpu/nvml_abi.h, src/bench/cuda_abi.h) differ from the toolkit's headers: see the errors above" >&2; exit 1; }
$(HDR_STAMP): FORCE
	@mkdir -p $(BUILD)
	@echo '$(HDR_FLAGS)' | cmp -s - $@ || echo '$(HDR_FLAGS)' > $@
$(HDR_OBJ): $(HDR_SRC) $(HDR_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CHECK $(HDR_SRC) against$(NVML_INC:%= %/nvml.h)$(CUDA_INC:%= %/cuda_runtime_api.h)"
	@$(CC) $(CFLAGS) $(HDR_FLAGS) -c $(HDR_SRC) -o $@ || $(HDR_FAIL)
ifneq ($(HDR_FLAGS),)
all: $(HDR_OBJ)
endif
.PHONY: check-headers
check-headers:
	@echo "check-headers: toolkit: $(or $(CUDA_HOME),none (no /usr/local/cuda, no nvcc on the PATH; set CUDA_HOME))"
	@echo "check-headers: cuda_runtime_api.h: $(if $(CUDA_INC),$(CUDA_INC)/cuda_runtime_api.h,not found (looked in: $(or $(HDR_DIRS),no toolkit)))"
	@echo "check-headers: nvml.h: $(if $(NVML_INC),$(NVML_INC)/nvml.h,not found (looked in: $(HDR_DIRS) /usr/include $(HDR_VENV); PyPI's nvidia-nvml-dev has it))"
ifeq ($(HDR_FLAGS),)
	@echo "check-headers: skipped: no header to check against"
else
	@mkdir -p $(dir $(HDR_OBJ))
	@$(CC) $(CFLAGS) $(HDR_FLAGS) -c $(HDR_SRC) -o $(HDR_OBJ) || $(HDR_FAIL)
	@echo "check-headers: stoker's declarations match$(NVML_INC:%= nvml.h)$(CUDA_INC:%= cuda_runtime_api.h)"
endif
-include $(HDR_OBJ:.o=.d)

# Each test runs in its own process with a timeout; the last line is
# "N passed, N failed, N skipped", C and Python added up (scripts/run-tests).
# T=pattern runs a subset of the C tests; T=python runs
# only the Python tests (pytest, python/tests), which a plain `make test`
# runs after the C ones (not in sanitizer builds: the interpreter is not
# instrumented). K=expr passes -k expr to pytest.
# The test packages (Open MPI among them) go in before the build, which a
# second make then sees.
test:
	@STOKER_VENV=$(abspath $(VENV)) ./scripts/install-deps test
	@./scripts/run-tests "$(MAKE)" "$(BUILD)" "$(T)" "$(SAN)"

test-c: $(TESTBIN) $(CLI) $(FAKENVML)
	STOKER_VENV=$(abspath $(VENV)) STOKER_BIN=$(abspath $(CLI)) STOKER_FAKE_NVML=$(abspath $(FAKENVML)) LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 $(TESTBIN) $(T)

# ---- installing ------------------------------------------------------------

# make install PREFIX=/opt/stoker [DESTDIR=staging]: the library (static and
# shared, with its soname link), the public headers, stoker.pc and the CLI.
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
$(BUILD)/stoker.pc: stoker.pc.in Makefile
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
	    -e 's|@VERSION@|$(shell sed -n 's/^#define STOKER_VERSION "\(.*\)"/\1/p' include/stoker/util.h)|g' \
	    -e 's|@REQUIRES@|$(PKGS)|g' -e 's|@SYSLIBS@|$(SYSLIBS)|g' stoker.pc.in > $@
$(BUILD)/stoker.pc: FORCE

install: all $(BUILD)/stoker.pc
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR)/stoker $(DESTDIR)$(BINDIR)
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/libstoker.a
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/libstoker.so.$(SOVER)
	ln -sf libstoker.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libstoker.so
	install -m 644 include/stoker/*.h $(DESTDIR)$(INCDIR)/stoker/
	install -m 644 $(BUILD)/stoker.pc $(DESTDIR)$(LIBDIR)/pkgconfig/stoker.pc
	install -m 755 $(CLI) $(DESTDIR)$(BINDIR)/stoker

# ---- the Python package ------------------------------------------------------

# make python: the stoker package built from python/ against build/libstoker.a
# into a virtual environment (.venv) that scripts/install-deps makes from
# Debian's python3 and PyPI (torch, torchvision, numpy, pytest, moto: the
# versions are python/requirements-test.txt).
VENV ?= .venv
PYTHON_SRC := $(wildcard python/stoker/*.py python/stoker/*.pyi python/src/*.c python/src/*.h) \
              python/setup.py python/pyproject.toml python/requirements-test.txt
$(VENV)/.stoker-installed: $(STATIC) $(PYTHON_SRC) Makefile
	@STOKER_VENV=$(abspath $(VENV)) ./scripts/install-deps python
	@# setuptools relinks only when a source is newer than its last build, not
	@# when the link line changes (a new dependency of libstoker): start clean.
	rm -rf python/build
	STOKER_ROOT=$(abspath .) STOKER_LIB=$(abspath $(STATIC)) $(VENV)/bin/pip install -q \
	    --no-build-isolation --no-index ./python
	@touch $@
python: $(VENV)/.stoker-installed

# The Python tests against an AddressSanitizer+UBSan build of the extension
# and the library (build/asan), with the sanitizer runtime preloaded into
# the venv's python3 (leak checks off: the interpreter keeps memory at exit).
test-python-asan:
	@STOKER_VENV=$(abspath $(VENV)) ./scripts/install-deps python
	@$(MAKE) --no-print-directory BUILD=build/asan OPT=-O1 SAN=address,undefined build/asan/libstoker.a build/asan/stoker
	rm -rf build/asan/python && mkdir -p build/asan/python
	cp -r python/setup.py python/pyproject.toml python/src python/stoker build/asan/python/
	cd build/asan/python && STOKER_ROOT=$(abspath .) STOKER_LIB=$(abspath build/asan/libstoker.a) \
	    CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -O1" LDFLAGS="-fsanitize=address,undefined" \
	    $(abspath $(VENV))/bin/python setup.py -q build_ext --inplace
	cd python/tests && LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	    ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 PYTHONPATH=$(abspath build/asan/python) \
	    STOKER_BIN=$(abspath build/asan/stoker) STOKER_ROOT=$(abspath .) \
	    $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider -k 'not install and not gloo$(if $(K), and ($(K)))'

test-python: python $(CLI)
	cd python/tests && STOKER_BIN=$(abspath $(CLI)) STOKER_ROOT=$(abspath .) \
	    $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider $(if $(K),-k '$(K)')

# Sanitizer builds of the whole suite (address+undefined) and of the
# concurrent tests (thread).
test-asan:
	$(MAKE) BUILD=build/asan OPT=-O1 SAN=address,undefined test
test-tsan:
	$(MAKE) BUILD=build/tsan OPT=-O1 SAN=thread test T='$(or $(T),loader sampler concurrent cache_ origin_)'

check: test test-asan test-tsan

# The include rule between the layers (docs/internals/layers.md); the test
# dataset_layers_include_rule runs the same check.
layers:
	@tests/tools/check-layers .

# libFuzzer targets, one per parser, built with clang; FUZZ_SECONDS each.
FUZZ_SECONDS ?= 20
FUZZ_BUILD := build/fuzz
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -fsanitize=fuzzer-no-link,address,undefined
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BINS := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/%)

$(FUZZ_BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	@echo "  CLANG $<"; clang $(FUZZ_CFLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined $(PKG_CFLAGS) -o $@ $< $(FUZZ_LIB_OBJ) $(LDLIBS)

fuzz-build: $(FUZZ_BINS)

# Keep the library objects between fuzz targets and runs.
.SECONDARY: $(FUZZ_LIB_OBJ)

fuzz: fuzz-build
	@./scripts/install-deps test
	@set -e; for b in $(FUZZ_BINS); do \
	  n=$$(basename $$b); c=tests/fuzz/corpus/$${n#fuzz_}; w=$(FUZZ_BUILD)/corpus/$${n#fuzz_}; \
	  mkdir -p $$w; echo "fuzz: $$n for $(FUZZ_SECONDS)s"; \
	  $$b -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=0 $$w $$c 2>$(FUZZ_BUILD)/$$n.log \
	    || { tail -40 $(FUZZ_BUILD)/$$n.log; exit 1; }; \
	  grep -E '^#[0-9]+.*DONE' $(FUZZ_BUILD)/$$n.log | tail -1; \
	done

# Benchmark programs: bench/NAME.c -> build/bench/NAME, linked with the
# static library (they may use internal headers to time one stage alone).
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BINS := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
$(BUILD)/bench/%: bench/%.c $(STATIC) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC) $(LDLIBS)

bench-build: all $(BENCH_BINS)

# Each bench/NAME.sh prints a short table and writes bench/results/NAME.json.
bench: bench-build
	@./scripts/install-deps bench
	./bench/run $(B)

format:
	clang-format -i $(LIB_SRC) $(CLI_SRC) $(TEST_SRC) $(wildcard include/stoker/*.h src/*/*.h tests/*.h)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(MPI_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(FUZZ_LIB_OBJ:.o=.d)
