# rankwise: `make demo` runs the main job, `make test` runs every test.
# Both install what is missing first (scripts/setup, Debian packages only).
BUILD ?= build
JOBS ?= $(shell nproc)
NPROC ?= 2
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60

.PHONY: all setup configure build test demo bench fuzz clean

all: build

setup:
	@bash scripts/setup

configure: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: configure
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

demo: build
	$(BUILD)/rankwise-run --nproc-per-node $(NPROC) $(BUILD)/examples/fashion_mnist \
	  --checkpoint-dir $(BUILD)/fashion_mnist_checkpoints --overwrite-checkpoints

bench: build
	bash bench/run $(BUILD)

# libFuzzer targets (clang, ASan + UBSan), each run FUZZ_SECONDS; not part of
# `make test`. Fails when a target finds a crash (fuzz/run).
fuzz: setup
	@bash scripts/setup-fuzz
	bash fuzz/run $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD)
