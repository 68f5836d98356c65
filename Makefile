# Root wrapper around CMake. `make` builds everything into build/ (it
# installs nothing: `make deps` installs the Debian packages the build and
# tests need); `make test` installs them, sets up the consumer tests' tools
# and runs every test with -Werror; `make demo` converts the bundled example.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= 2
# make test, asan and fuzz keep warnings errors (TRACEMILL_WERROR), as CI does.
CI_FLAGS ?= -DTRACEMILL_WERROR=ON

.PHONY: all deps build test asan fuzz fuzz-smoke demo bench bench-serve bench-record bench-record-naming bench-heap bench-symbolize golden check-src python deb clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null || \
	  { echo "make: configuring failed; \`make deps\` installs what the build needs (Debian/Ubuntu)"; \
	    rm -f $@; exit 1; }

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The consumer tests' tools (go build, npm ci) are set up here, not by
# ctest, which needs no network.
test: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CI_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	tests/consumers/setup.sh $(BUILD)
	scripts/checksrc.sh $(BUILD)
	cd $(BUILD) && ctest --output-on-failure

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTM_SANITIZE=ON $(CI_FLAGS) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	tests/consumers/setup.sh $(ASAN_BUILD)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure

# libFuzzer on one target (fuzz/fuzz_TARGET.c) for SECONDS, under ASan and
# UBSan, from its seed corpus; new inputs go to build-fuzz/corpus/TARGET and
# crashes to build-fuzz/ (add them to fuzz/regressions/TARGET/ by name).
FUZZ_BUILD ?= build-fuzz
TARGET ?= trace
SECONDS ?= 60
fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTM_SANITIZE=ON -DTM_FUZZ=ON $(CI_FLAGS) >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_$(TARGET)
	mkdir -p $(FUZZ_BUILD)/corpus/$(TARGET)
	cd $(FUZZ_BUILD) && ./fuzz_$(TARGET) -max_total_time=$(SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -dict=../fuzz/perfetto.dict corpus/$(TARGET) ../fuzz/corpus/$(TARGET)

# Every fuzz target for FUZZ_SECONDS each (two at a time), failing on any
# finding: what CI runs after the tests.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(patsubst fuzz/%.c,%,$(wildcard fuzz/fuzz_*.c))
fuzz-smoke: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTM_SANITIZE=ON -DTM_FUZZ=ON $(CI_FLAGS) >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	scripts/fuzz_smoke.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

demo: deps
	@$(MAKE) --no-print-directory build
	@scripts/demo.sh $(BUILD)

bench: build
	@scripts/bench.sh $(BUILD)

# The ingest server under load: chunks/s, MB/s, latency percentiles, CPU.
bench-serve: build
	@scripts/bench_serve.sh $(BUILD)

# The recorder's overhead: a CPU-bound program plain and recorded at 101 and
# 250 Hz, ratio of medians, and trace bytes per sample; the signal backend's
# clock read per sample; the perf backend's --off-cpu against without it.
bench-record: build
	@$(BUILD)/bench_record --preload $(abspath $(BUILD))/libtracemill_record.so --perf $(abspath $(BUILD))/tracemill-record-perf --runs 11 --work 2000

# What naming frames at record time costs the recorded program (CPU, trace
# size) against writing build ids and pcs only, the default.
bench-record-naming: build
	@$(BUILD)/bench_record --preload $(abspath $(BUILD))/libtracemill_record.so --runs 11 --work 300 --naming

# The heap profiler's overhead: a malloc-heavy 2-thread loop plain and under
# --heap in rotating rounds, CPU time from wait4, ratio of medians and median
# of the rounds' ratios, cost per sampled and per unsampled call.
# HEAP_BASELINE=other/libtracemill_record.so adds that build's --heap runs.
bench-heap: build
	@$(BUILD)/bench_heap --preload $(abspath $(BUILD))/libtracemill_record.so --runs 15 \
	  $(if $(HEAP_BASELINE),--baseline $(abspath $(HEAP_BASELINE)))

# tm_symbolize on 100 000 pcs over 20 libraries, against addr2line and
# llvm-symbolizer on the same pcs.
bench-symbolize: build
	@$(BUILD)/bench_symbolize

# The Python package (python/) built in place into $(BUILD)/python/lib with
# /usr/bin/python3 (offline); `pip install ./python` installs it.
python: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target tracemill_static
	cd python && TRACEMILL_BUILD_DIR=$(abspath $(BUILD)) /usr/bin/python3 setup.py -q build_py \
	  --build-lib $(abspath $(BUILD))/python/lib build_ext --build-lib $(abspath $(BUILD))/python/lib \
	  --build-temp $(abspath $(BUILD))/python/tmp
	@echo "python: PYTHONPATH=$(abspath $(BUILD))/python/lib /usr/bin/python3 -c 'import tracemill'"

# The Debian packages (debian/) built from a copy of the tree into
# $(DEB_BUILD), lintian run on them, then unpacked into a scratch root and
# used from there (scripts/deb.sh); installs debhelper, devscripts, lintian
# and the Build-Depends first.
DEB_BUILD ?= build-deb
deb:
	@scripts/install-deps.sh --deb
	JOBS=$(JOBS) scripts/deb.sh $(DEB_BUILD)

# Rewrites tests/golden/* from the current build; review `git diff` after.
golden: build
	tests/golden/run.sh $(BUILD)/tracemill . --update

check-src:
	scripts/checksrc.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(DEB_BUILD)
