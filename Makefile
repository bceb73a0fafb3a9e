# The README's two quick-start commands: `make run` and `make test`.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS ?= 2
# seconds each libFuzzer target runs in `make fuzz-smoke`
FUZZ_SECONDS ?= 20
FUZZ_TARGETS := $(basename $(notdir $(wildcard fuzz/*_fuzz.c)))

.PHONY: all deps fuzz-deps build run test test-asan fuzz-config fuzz fuzz-smoke bench clean

all: build

# build and test packages only; the fuzz build's (clang and its runtime) are fuzz-deps'
deps:
	@scripts/deps.sh

fuzz-deps:
	@scripts/deps.sh fuzz

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# Shows what strata is for, on a synthetic model made on the fly: decode speed at a short and a
# long context with a small RAM pool, SSD spill and Quest (`strata demo --help`).
run: build
	./$(BUILD)/strata demo

# Unit and model tests (everything but the `slow` label).
test: build
	ctest --test-dir $(BUILD) -LE slow --output-on-failure -j$(JOBS)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON -DSTRATA_CHECK=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	ctest --test-dir $(ASAN_BUILD) -L unit --output-on-failure -j$(JOBS)

fuzz-config: fuzz-deps
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON >/dev/null

# The libFuzzer targets (clang, ASan + UBSan) in build-fuzz/fuzz/, and everything else in that build.
fuzz: fuzz-config
	@cmake --build $(FUZZ_BUILD) -j$(JOBS)

# CI: builds only the fuzz targets (and the GGUF seed writer) and runs each FUZZ_SECONDS from
# a seed corpus; fails on any crash, leak, hang or failed check.
fuzz-smoke: fuzz-config
	@cmake --build $(FUZZ_BUILD) -j$(JOBS) --target $(FUZZ_TARGETS) test_gguf_corpus
	scripts/fuzz-smoke.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
