# pyrope: the two commands that do all set-up on a fresh machine are
#   make demo   -- install the package and run the main demonstration
#   make test   -- install what the tests need and run the whole suite
PYTHON ?= python3
PIP = $(PYTHON) -m pip --disable-pip-version-check

.PHONY: demo test test-baseline install install-test install-bench build bench sanitize fuzz fuzz-rope fuzz-gguf tsan check-kernels check-aarch64 check-x86-baselines check-recipes c-example check-wheel clean

# The C core: every C file under csrc/, whatever its plane (api/, core/, scalar/,
# isa/<name>/), with csrc/ the one include directory; the one source list of
# every target below that builds it.
CSRC_SOURCES := $(shell find csrc -name '*.c' | LC_ALL=C sort)
CSRC_HEADERS := $(shell find csrc -name '*.h' | LC_ALL=C sort)

install:            ## the package, editable, with its runtime dependencies
	$(PIP) install --quiet -e .

# A stamp, so `make sanitize` right after `make test` (as CI runs them) does not
# install and build everything a second time; any change to what the install
# builds or pulls in makes it run again, and `make clean` removes it. One stamp
# per environment (named after its prefix, and older than a venv made anew in
# the same place): another venv, or this one made again, gets its own install.
PYTHON_ENV := $(shell $(PYTHON) -c 'import hashlib, os, sys; p = sys.prefix; print(hashlib.sha1(p.encode()).hexdigest()[:12], \
  os.path.join(p, "pyvenv.cfg") if p != sys.base_prefix else os.path.realpath(sys.executable))' 2>/dev/null)
TEST_STAMP = build/.installed-test-$(word 1,$(PYTHON_ENV))
install-test: $(TEST_STAMP)   ## the package plus everything the tests need

# --no-compile: pip would byte-compile every module of torch, transformers and the
# rest, half of the install's time; Python compiles what the tests import, once,
# if it may write the bytecode: with PYTHONDONTWRITEBYTECODE set (some images
# set it) every process the suite starts would compile torch anew (9.4 s to
# import torch and transformers against 4.1 s), so no target passes it on.
unexport PYTHONDONTWRITEBYTECODE
$(TEST_STAMP): pyproject.toml setup.py pyrope/_build.py $(CSRC_SOURCES) $(CSRC_HEADERS) $(word 2,$(PYTHON_ENV))
	$(PIP) install --quiet --no-compile -e ".[test,conformance]"
	mkdir -p build && touch $@

demo: install
	$(PYTHON) -m pyrope demo

test: install-test
	$(PYTHON) -m pytest -q

# The frequency rules, contracts, tables, GGUF and transformers conformance again
# with numpy's run-time dispatch limited to its baseline (every dispatch target it
# has disabled): no value may depend on which vectorised routine numpy picks for
# the CPU (tests/rules/test_same_bits.py compares the digests of both in one run too).
BASELINE_TESTS = rules/same_bits rules/scaling rules/rope_scaling rules/config rules/contract \
  rules/contract_upgrade kernel/tables readers/gguf rules/transformers_conformance
test-baseline: install-test
	NPY_DISABLE_CPU_FEATURES="$$($(PYTHON) tests/support/bits_digest.py --dispatch-targets)" \
	  $(PYTHON) -m pytest -q -p no:cacheprovider $(foreach t,$(BASELINE_TESTS),tests/$(dir $(t))test_$(notdir $(t)).py)

build:              ## build the C extension and libpyrope in place (no install)
	$(PYTHON) pyrope/_build.py

install-bench:      ## the package plus the benchmark peers (torch, onnxruntime, ml_dtypes)
	$(PIP) install --quiet --no-compile -e ".[test,bench]"

bench: install-bench
	$(PYTHON) -m pytest bench -q --benchmark-only --benchmark-columns=median,iqr,rounds

clean:
	rm -rf build *.egg-info pyrope/_pyrope_cffi* pyrope/lib pyrope/include .pytest_cache .benchmarks

# The C library: the C examples (docs/examples/decode_loop.c, paged_write.c,
# quant_shift.c) each built with the command docs/examples/README.md documents
# for it (read from there), against this checkout (c-example) or against the
# wheel installed in a throwaway venv (check-wheel, which also lists the wheel's
# C files), and run: a program's exit status counts (its output goes to
# <name>.out, whose last lines, the checks it made, are shown). Neither touches
# the installed package.
# check-wheel builds as pip builds for a user (in an isolated environment with
# pyproject.toml's build requirements) and installs the wheel with its declared
# dependencies into a venv without the system's site-packages: nothing installed
# beside it can stand in for a build requirement or a dependency the wheel lacks.
C_EXAMPLES = decode_loop paged_write quant_shift
CHECK_LINES_decode_loop = 2
CHECK_LINES_paged_write = 1
CHECK_LINES_quant_shift = 2
# $(call EXAMPLE_CMD,<name>): the documented command building <name>.c
EXAMPLE_CMD = grep '^cc .* $(1)\.c ' $(CURDIR)/docs/examples/README.md
# $(call RUN_EXAMPLE,<name>,<env>,<where ldd must find libpyrope>), in the example's directory
RUN_EXAMPLE = $(2) sh -c "$$($(call EXAMPLE_CMD,$(1)))" && ldd $(1) | grep '$(3)' && \
  ./$(1) > $(1).out && tail -$(CHECK_LINES_$(1)) $(1).out
c-example: build
	rm -rf build/c-example && mkdir -p build/c-example && cp $(C_EXAMPLES:%=docs/examples/%.c) build/c-example/
	cd build/c-example && $(foreach e,$(C_EXAMPLES),$(call RUN_EXAMPLE,$(e),PYTHONPATH=$(CURDIR),libpyrope) && ) true

WHEEL_DIR = build/wheel
WHEEL_BIN = $(CURDIR)/$(WHEEL_DIR)/venv/bin
WHEEL_LIB = $(CURDIR)/$(WHEEL_DIR)/venv/.*/libpyrope
check-wheel:
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)
	$(PIP) wheel --quiet --no-deps -w $(WHEEL_DIR) .
	unzip -l $(WHEEL_DIR)/*.whl | grep -E 'pyrope/(include|lib)/'
	for f in include/pyrope.h lib/libpyrope.so 'lib/libpyrope.so.[0-9][0-9]*' lib/pkgconfig/pyrope.pc; do \
	  unzip -l $(WHEEL_DIR)/*.whl | grep -q " pyrope/$$f$$" || { echo "the wheel lacks pyrope/$$f"; exit 1; }; done
	unzip -l $(WHEEL_DIR)/*.whl | grep -q ' pyrope_rotary-[^/]*\.dist-info/licenses/LICENSE$$' || { echo "the wheel lacks LICENSE"; exit 1; }
	$(PYTHON) -m venv $(WHEEL_DIR)/venv
	$(WHEEL_DIR)/venv/bin/pip install --quiet --disable-pip-version-check $(WHEEL_DIR)/*.whl
	cd $(WHEEL_DIR) && venv/bin/pyrope --version
	cp $(C_EXAMPLES:%=docs/examples/%.c) $(WHEEL_DIR)/
	cd $(WHEEL_DIR) && $(foreach e,$(C_EXAMPLES),$(call RUN_EXAMPLE,$(e),PATH=$(WHEEL_BIN):$$PATH,$(WHEEL_LIB)) && ) true

# The C core under AddressSanitizer + UndefinedBehaviorSanitizer: a separate
# build in build/sanitize (the normal in-place build is left alone), then the
# test suite with both kernels, with the ASan runtime preloaded into Python.
# Left out of this run (they run in `make test`): tests of Python-only layers
# (configs, contracts, rules and the readers: the folders tests/rules and
# tests/readers whole; the command line, the docs and the build; the
# transformers models; torch's tracing of pyrope's custom ops, whose kernels are
# the eager calls the interop tests make; the distributed runs, whose ranks import
# torch and transformers anew and make the transformers tests' calls), whose C calls
# are the ones the kernel tests make, and
# the fuzz replay, which builds its own sanitized binary.
SAN_SKIP_DIRS = rules readers
SAN_SKIP = tools/fuzz_replay tools/build_names tools/install tools/readme tools/install_hints tools/declared_imports \
  tools/imports tools/cli tools/cli_hardening tools/check tools/benchmark \
  interop/transformers_patch interop/transformers_compiled interop/torch_ops interop/distributed \
  api/multimodal_model api/multimodal_positions
# and single tests: one that builds and runs a C program of its own without the
# sanitizers (`make tsan` runs that one under ThreadSanitizer); the tables' accuracy
# sweeps over dense position ranges, whose calls are the other table tests' on more
# positions; float64 through a transformers model, as the transformers models above.
# The guard tests place rows at three byte offsets instead of every one
# (PYROPE_TEST_OFFSETS=few, see tests/kernel/test_tails_guard.py).
SAN_DESELECT = tests/kernel/test_thread_pool.py::test_split_calls_in_c \
  tests/kernel/test_tables.py::test_dense_ranges_within_one_ulp tests/kernel/test_tables.py::test_near_multiples_of_half_pi_within_one_ulp \
  tests/api/test_float64.py::test_float64_matches_transformers_run_in_float64
SAN_IGNORE = $(foreach d,$(SAN_SKIP_DIRS),--ignore=tests/$(d)) $(foreach t,$(SAN_SKIP),--ignore=tests/$(dir $(t))test_$(notdir $(t)).py) \
  $(foreach t,$(SAN_DESELECT),--deselect=$(t))
# float-cast-overflow: gcc's `undefined` leaves out float-to-integer conversions of
# values out of range (NaN, infinities), which the quantisers must never make.
SAN_FLAGS = -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1
SAN_DIR = build/sanitize
sanitize: install-test
	rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)
	cp -r pyrope csrc tests docs pyproject.toml setup.py MANIFEST.in README.md $(SAN_DIR)/
	rm -f $(SAN_DIR)/pyrope/_pyrope_cffi*
	cd $(SAN_DIR) && PYROPE_CFLAGS="$(SAN_FLAGS)" PYROPE_LDFLAGS="-fsanitize=address,undefined" $(PYTHON) pyrope/_build.py
	cd $(SAN_DIR) && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  $(PYTHON) -c "import pyrope, sys; assert pyrope.__file__.startswith('$(CURDIR)/$(SAN_DIR)'), pyrope.__file__" && \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" PYROPE_TEST_OFFSETS=few \
	  $(PYTHON) -m pytest -q -p no:cacheprovider --capture=sys $(SAN_IGNORE)

# Coverage-guided fuzzing, each target for FUZZ_SECONDS: the C entry points
# (libFuzzer, clang; new coverage merged into tests/fuzz/corpus, a crashing
# input written to tests/fuzz/regressions/, replayed by tests/tools/test_fuzz_replay.py
# once committed) and Rope.from_gguf on GGUF files (atheris, the `fuzz` extra;
# tests/fuzz/gguf_corpus and tests/fuzz/gguf_regressions/, replayed by
# tests/readers/test_gguf_hostile.py). Each GGUF input has 5 s (-timeout) and the
# process 2 GiB of RSS; the target caps its address space and each input's
# allocations itself (tests/fuzz/fuzz_gguf.py).
FUZZ_SECONDS ?= 120
fuzz: fuzz-rope fuzz-gguf

fuzz-rope:
	command -v clang >/dev/null || (apt-get update -qq && apt-get install -y -qq clang libclang-rt-14-dev)
	mkdir -p build/fuzz-corpus tests/fuzz/regressions
	clang -std=c11 -O1 -g -Wall -Wextra -ffp-contract=off -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=all -Icsrc tests/fuzz/fuzz_rope.c $(CSRC_SOURCES) -lm -lpthread -o build/fuzz_rope
	build/fuzz_rope -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 \
	  -artifact_prefix=tests/fuzz/regressions/ build/fuzz-corpus tests/fuzz/corpus
	build/fuzz_rope -merge=1 tests/fuzz/corpus build/fuzz-corpus

fuzz-gguf:
	$(PYTHON) -c "import atheris, gguf" 2>/dev/null || $(PIP) install --quiet -e ".[fuzz]"
	mkdir -p build/fuzz-gguf-corpus tests/fuzz/gguf_regressions
	$(PYTHON) tests/fuzz/fuzz_gguf.py -max_total_time=$(FUZZ_SECONDS) -timeout=5 -rss_limit_mb=2048 \
	  -max_len=4096 -print_final_stats=1 -artifact_prefix=tests/fuzz/gguf_regressions/ \
	  build/fuzz-gguf-corpus tests/fuzz/gguf_corpus
	# the merge reruns the target as its own command: python3 is then $(PYTHON)'s
	PATH="$$(dirname "$$(command -v $(PYTHON))"):$$PATH" tests/fuzz/fuzz_gguf.py -merge=1 \
	  tests/fuzz/gguf_corpus build/fuzz-gguf-corpus

# ThreadSanitizer on the C core's threading: tests/c/threads_race.c runs
# concurrent rotations (each on the library's thread pool), fused q/k calls
# and table builds while another thread keeps switching the instruction set,
# and compares every result with the serial one. (An uninstrumented Python
# cannot host TSan's runtime here, hence a C driver.)
tsan:
	mkdir -p build
	$(CC) -std=c11 -O1 -g -Wall -Wextra -ffp-contract=off -fsanitize=thread -Icsrc \
	  tests/c/threads_race.c $(CSRC_SOURCES) -lm -lpthread -o build/threads_race
	TSAN_OPTIONS=halt_on_error=1 build/threads_race

# Which registry entries a CPU must offer, derived from the registry: each
# entry states the CPU flags it needs (its bases' included; Linux's spelling,
# as /proc/cpuinfo shows them), which `kernels_identical --isa-features`
# prints, and a CPU must offer, in registry order, exactly the entries whose
# every flag it has. $(call EXPECTED_ISAS,<the CPU's flags>,<command running
# kernels_identical>) prints them as `--isas | tr '\n' ' '` does ("scalar ...").
EXPECTED_ISAS = $(2) --isa-features 2>/dev/null | awk -v have="$(1)" \
  'BEGIN { n = split(have, f, " "); for (i = 1; i <= n; i++) h[f[i]] = 1 } \
   { ok = 1; for (i = 2; i <= NF; i++) if (!($$i in h)) ok = 0; if (ok) printf "%s ", $$1 }'
# $(call CHECK_ISAS,<CPU>,<its flags>,<command running kernels_identical>)
CHECK_ISAS = want="$$($(call EXPECTED_ISAS,$(2),$(3)))"; got="$$($(3) --isas 2>/dev/null | tr '\n' ' ')"; \
  test "$$got" = "$$want" || { echo "$(1): expected the entries $$want(its flags: $(2)), got $$got"; exit 1; }; \
  echo "$(1): offers $$got(as its flags say)"

# Every SIMD rotation kernel this machine can run (each registry entry it
# supports: AVX2 and AVX-512 here) against the scalar kernels, bit for bit,
# called directly: tests/c/kernels_identical.c; first, that the entries it
# offers are those its flags in /proc/cpuinfo call for.
KERNEL_CFLAGS = -std=c11 -O2 -Wall -Wextra -ffp-contract=off -fno-math-errno -pthread -Icsrc
HOST_FLAGS = $$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo | cut -d: -f2)
# The C core's objects with the library's own flags, compiled once for the checks'
# programs (kernels_identical for check-kernels and check-x86-baselines, which CI
# runs one after the other, and the portable digest of check-aarch64), natively
# and for aarch64: file targets, remade when a source or header changes.
NATIVE_OBJS = $(CSRC_SOURCES:csrc/%.c=build/obj/native/%.o)
A64_OBJS = $(CSRC_SOURCES:csrc/%.c=build/obj/aarch64/%.o)
build/obj/native/%.o: csrc/%.c $(CSRC_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(KERNEL_CFLAGS) -c $< -o $@
build/obj/aarch64/%.o: csrc/%.c $(CSRC_HEADERS)
	@mkdir -p $(dir $@)
	$(A64_CC) $(KERNEL_CFLAGS) -Werror -c $< -o $@
.SECONDARY: $(NATIVE_OBJS) $(A64_OBJS)
build/kernels_identical: tests/c/kernels_identical.c $(NATIVE_OBJS)
	$(CC) $(KERNEL_CFLAGS) tests/c/kernels_identical.c $(NATIVE_OBJS) -lm -o $@
build/digest_native: tests/c/portable_digest.c $(NATIVE_OBJS)
	$(CC) $(KERNEL_CFLAGS) tests/c/portable_digest.c $(NATIVE_OBJS) -lm -o $@
build/%_aarch64: tests/c/%.c $(A64_OBJS)
	$(A64_CC) $(KERNEL_CFLAGS) -Werror $< $(A64_OBJS) -lm -static -o $@
check-kernels: build/kernels_identical
	@$(call CHECK_ISAS,this machine,$(HOST_FLAGS),build/kernels_identical)
	build/kernels_identical

# The two recipes of docs/ARCHITECTURE.md, applied as written to a scratch
# copy (build/recipes/tree): a toy instruction set keeping the scalar kernels
# and a 1-byte storage type; that copy's C core and extension under ASan +
# UBSan, tests/c/kernels_identical.c and the Python kernel tests over every
# ISA x storage type on them (tests/support/recipes.py, the recipes' executable form).
check-recipes: install-test
	CC="$(CC)" $(PYTHON) tests/support/recipes.py

# The C core on aarch64 (cross gcc, static, run under qemu-user): the whole
# of csrc/ must build warning-free; tests/c/portable_digest.c built natively
# and for aarch64 must print the same digests (the scalar kernels and tables
# bit-identical across architectures); tests/c/kernels_identical.c checks
# every NEON kernel against the scalar one there, on qemu's "max" CPU, which
# has FEAT_BF16, so the "neonbf16" entry runs too (a CPU without it, the
# Cortex-A72, must not offer that entry). Which entries each CPU must offer
# is derived from the registry (EXPECTED_ISAS) and the CPU's flags, as Linux
# lists them for it (those any entry could need; a flag missing here makes
# an entry needing it expected unsupported).
A64_CC = aarch64-linux-gnu-gcc
A72_FLAGS = fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid
QEMU_MAX_A64_FLAGS = fp asimd aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc \
  dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes \
  svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 bti mte
check-aarch64:
	command -v $(A64_CC) >/dev/null && command -v qemu-aarch64 >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user)
	$(MAKE) --no-print-directory build/digest_native build/portable_digest_aarch64 build/kernels_identical_aarch64
	build/digest_native > build/digest_native.txt
	qemu-aarch64 build/portable_digest_aarch64 > build/digest_aarch64.txt
	diff build/digest_native.txt build/digest_aarch64.txt && echo "aarch64 scalar kernels: bit-identical to $$(uname -m)"
	@$(call CHECK_ISAS,Cortex-A72,$(A72_FLAGS),qemu-aarch64 -cpu cortex-a72 build/kernels_identical_aarch64)
	@$(call CHECK_ISAS,qemu's max CPU,$(QEMU_MAX_A64_FLAGS),qemu-aarch64 -cpu max build/kernels_identical_aarch64)
	qemu-aarch64 -cpu max build/kernels_identical_aarch64

# The dispatch on x86-64 CPUs older than this one, under qemu-user's CPU
# models (their CPUID): a Haswell (AVX2, no AVX-512) and a Nehalem (no AVX)
# must offer the entries their flags call for (EXPECTED_ISAS: today scalar
# and avx2, and scalar alone), and the Haswell's kernels must match the
# scalar ones, at three offsets (--quick: check-kernels sweeps every offset
# natively, and this machine runs AVX2; under qemu the point is that no
# instruction past the Haswell's leaks into its path). The flags are the
# models' as Linux lists them (those any entry could need). The same binary
# runs on any x86-64: no -march.
HASWELL_FLAGS = fpu tsc cx8 cmov mmx fxsr sse sse2 pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt \
  aes xsave avx f16c rdrand lahf_lm abm fsgsbase bmi1 avx2 smep bmi2 erms
NEHALEM_FLAGS = fpu tsc cx8 cmov mmx fxsr sse sse2 pni ssse3 cx16 sse4_1 sse4_2 popcnt lahf_lm
check-x86-baselines: build/kernels_identical
	command -v qemu-x86_64 >/dev/null || (apt-get update -qq && apt-get install -y -qq qemu-user)
	@$(call CHECK_ISAS,Haswell,$(HASWELL_FLAGS),qemu-x86_64 -cpu Haswell build/kernels_identical)
	@$(call CHECK_ISAS,Nehalem,$(NEHALEM_FLAGS),qemu-x86_64 -cpu Nehalem build/kernels_identical)
	qemu-x86_64 -cpu Haswell build/kernels_identical --quick 2>/dev/null
