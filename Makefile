# rankwise: `make demo` runs the main job and draws its report, `make test` runs every test.
# Both install what is missing first (scripts/setup, Debian packages only).
#
# TORCH picks the libtorch to build against:
#   TORCH=debian (default)  Debian's libtorch 1.13, in build/
#   TORCH=wheel             PyPI's torch wheel (pinned in scripts/setup-torch-wheel),
#                           installed into build-wheel/venv, built in build-wheel/
#                           (`make clean TORCH=wheel` removes the venv too)
TORCH ?= debian
JOBS ?= $(shell nproc)
NPROC ?= 2
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60

ifeq ($(TORCH),wheel)
BUILD ?= build-wheel
VENV := $(BUILD)/venv
PYTHON := $(abspath $(VENV))/bin/python
SETUP := bash scripts/setup && bash scripts/setup-torch-wheel $(VENV)
# The wheel's torch/share/cmake, and the torch directory above it (so that
# TorchConfig's find_library finds the wheel's libtorch, not Debian's).
TORCH_CMAKE = $$($(PYTHON) -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
CMAKE_ARGS = -DCMAKE_PREFIX_PATH="$(TORCH_CMAKE);$(TORCH_CMAKE)/../.." -DRANKWISE_PYTHON=$(PYTHON)
else ifeq ($(TORCH),debian)
BUILD ?= build
PYTHON := /usr/bin/python3
SETUP := bash scripts/setup
CMAKE_ARGS =
else
$(error TORCH=$(TORCH): use TORCH=debian (Debian's libtorch 1.13) or TORCH=wheel (PyPI's torch))
endif

.PHONY: all setup configure build test demo bench stress fuzz gpu-dry-run clean

all: build

setup:
	@$(SETUP)

configure: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

# The main job (progress on rank 0; metrics.jsonl beside its checkpoints),
# then its report: build/fashion_mnist_report.html. Builds only what it runs:
# the launcher and the main job (rankwise-report is copied at configure).
demo: configure
	cmake --build $(BUILD) -j$(JOBS) --target rankwise-run fashion_mnist
	$(BUILD)/rankwise-run --nproc-per-node $(NPROC) $(BUILD)/examples/fashion_mnist \
	  --checkpoint-dir $(BUILD)/fashion_mnist_checkpoints --overwrite-checkpoints
	$(BUILD)/rankwise-report $(BUILD)/fashion_mnist_checkpoints/metrics.jsonl -o $(BUILD)/fashion_mnist_report.html

bench: build
	bash bench/run $(BUILD)
# Every multi-process test STRESS_RUNS times at -j2 (scripts/stress): flakes
# under load. Not part of `make test`: hours on a 2-core machine.
STRESS_RUNS ?= 20
stress: build
	bash scripts/stress $(BUILD) $(STRESS_RUNS)

# libFuzzer targets (clang, ASan + UBSan), each run FUZZ_SECONDS; not part of
# `make test`. Fails when a target finds a crash (fuzz/run).
fuzz: setup
	@bash scripts/setup-fuzz
	bash fuzz/run $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The GPU check's dry run (scripts/gpu-check dry-run), as CI runs it: the
# torch the GPU machines have (GPU_TORCH, into build-gpu/venv) and only the
# prepared .debs; builds the library, the launcher and the no-GPU CUDA test.
# GPU_CHECK_TARGETS= (empty) builds everything the GPU check runs.
GPU_TORCH ?= 2.11.0
GPU_CHECK_TARGETS ?= rankwise-run mp_test_cuda_nccl
gpu-dry-run: setup
	bash scripts/setup-torch-wheel build-gpu/venv $(GPU_TORCH)
	[ -n "$$(ls build-gpu/debs/*.deb 2>/dev/null)" ] || bash scripts/gpu-check prepare
	PYTHON=$(abspath build-gpu/venv)/bin/python GPU_CHECK_JOBS=$(JOBS) GPU_CHECK_TARGETS="$(GPU_CHECK_TARGETS)" \
	  bash scripts/gpu-check dry-run

clean:
	rm -rf $(BUILD)
