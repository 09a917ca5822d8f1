# rankwise: `make demo` runs the main job, `make test` runs every test.
# Both install what is missing first (scripts/setup, Debian packages only).
BUILD ?= build
JOBS ?= $(shell nproc)
NPROC ?= 2

.PHONY: all setup configure build test demo bench clean

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

clean:
	rm -rf $(BUILD)
