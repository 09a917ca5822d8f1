#include "rankwise/checkpoint/rng_state.h"

#include "core/check.h"
#include "util/io.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "rankwise/error.h"

namespace rankwise::checkpoint {
namespace {

at::Generator generator(c10::Device device) {
  return at::globalContext().defaultGenerator(device);
}

// A run resumed with fewer visible GPUs (on a CPU machine, or with another
// CUDA_VISIBLE_DEVICES) restores what it can; said once per process.
void note_dropped_cuda_states(std::size_t saved, std::size_t devices) {
  static std::once_flag once;
  std::call_once(once, [&] {
    util::write_line(
        STDERR_FILENO,
        core::message("note: the checkpoint holds the RNG states of {} CUDA device{} and this "
                      "process sees {}: restored {}, dropped the rest (random numbers drawn on "
                      "GPUs differ from the saved run's; on the CPU they are the same)",
                      saved, saved == 1 ? "" : "s", devices, devices));
  });
}

}  // namespace

c10::IValue rng_state() {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  {
    auto cpu = generator(c10::Device(c10::kCPU));
    std::lock_guard<std::mutex> lock(cpu.mutex());
    state.insert("cpu", cpu.get_state());
  }
  c10::List<at::Tensor> cuda;
  const auto devices = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < devices; ++i) {
    auto gen = generator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(gen.mutex());
    cuda.push_back(gen.get_state());
  }
  state.insert("cuda", cuda);
  return state;
}

void set_rng_state(const c10::IValue& value) {
  auto bad = [](const std::string& why) {
    core::raise<CheckpointError>(
        "the saved RNG state is not usable: {} (expected {{\"cpu\": uint8 tensor, \"cuda\": [uint8 "
        "tensors]}} from rankwise::checkpoint::rng_state())",
        why);
  };
  if (!value.isGenericDict()) bad("it is a " + value.tagKind() + ", not a dict");
  const auto dict = value.toGenericDict();
  if (!dict.contains("cpu") || !dict.at("cpu").isTensor()) bad("no \"cpu\" tensor");
  {
    auto cpu = generator(c10::Device(c10::kCPU));
    std::lock_guard<std::mutex> lock(cpu.mutex());
    try {
      cpu.set_state(dict.at("cpu").toTensor());
    } catch (const c10::Error& e) {
      bad(e.what_without_backtrace());
    }
  }
  if (!dict.contains("cuda")) return;
  const auto cuda = dict.at("cuda");
  if (!cuda.isList()) bad("\"cuda\" is not a list");
  const auto states = cuda.toListRef();
  const auto devices = static_cast<std::size_t>(torch::cuda::device_count());
  if (states.size() > devices) note_dropped_cuda_states(states.size(), devices);
  for (std::size_t i = 0; i < std::min(states.size(), devices); ++i) {
    if (!states[i].isTensor()) bad("a \"cuda\" entry is not a tensor");
    auto gen = generator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(states[i].toTensor());
  }
}

}  // namespace rankwise::checkpoint
