# The README's two quick-start commands: `make run` and `make test`.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= 2

.PHONY: all deps build run test test-asan fuzz bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# Runs the main job on the built-in default (a synthetic model made on the fly).
run: build
	./$(BUILD)/strata run

# Unit and model tests (everything but the `slow` label).
test: build
	ctest --test-dir $(BUILD) -LE slow --output-on-failure -j$(JOBS)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	ctest --test-dir $(ASAN_BUILD) -L unit --output-on-failure -j$(JOBS)

fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j$(JOBS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
