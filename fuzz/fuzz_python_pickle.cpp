// detail::adapt_python_pickle(), the rewriter that makes Python's pickles
// readable by libtorch 1.13's Unpickler and guards it, on arbitrary bytes,
// then libtorch's Unpickler on every pickle the rewriter lets through, as
// read_checkpoint_file() does (here each tensor record is 64 zero bytes).
// Checks, besides "no crash":
//  - the rewriter throws only CheckpointError;
//  - a rewritten pickle is a fixed point of the rewrite: nothing is left that
//    the rewrite would change again, or refuse;
//  - what libtorch builds from it passes, or is refused by, check_tensor_bounds
//    and strip_pickle_state (ASan then checks every tensor's bytes).
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "checkpoint/pickle/python_pickle.h"
#include "checkpoint/pickle/unpickled_value.h"
#include "fuzz_input.h"

namespace {

constexpr std::size_t kRecordBytes = 64;

void unpickle(const std::string& pickle) {
  std::size_t consumed = 0;
  auto read = [&](char* buffer, std::size_t n) {
    n = std::min(n, pickle.size() - consumed);
    std::memcpy(buffer, pickle.data() + consumed, n);
    consumed += n;
    return n;
  };
  rankwise::checkpoint::pickle::RecordSizes records;
  auto read_record = [&](const std::string&) {
    at::DataPtr data = c10::GetCPUAllocator()->allocate(kRecordBytes);
    std::memset(data.get(), 0, kRecordBytes);
    records[data.get()] = kRecordBytes;
    return data;
  };
  c10::IValue value;
  try {
    torch::jit::Unpickler unpickler(read, nullptr, nullptr, read_record, at::Device(at::kCPU));
    value = unpickler.parse_ivalue();
  } catch (const std::exception&) {
    return;  // libtorch refused it: read_checkpoint_file turns that into a CheckpointError
  }
  rankwise_fuzz::only_rankwise_errors("check_tensor_bounds / strip_pickle_state", [&] {
    rankwise::checkpoint::pickle::check_tensor_bounds(value, records, "input");
    rankwise::checkpoint::pickle::strip_pickle_state(value);
    rankwise_fuzz::touch(value);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string rewritten;
  try {
    rewritten = rankwise::checkpoint::pickle::adapt_python_pickle(reinterpret_cast<const char*>(data), size, "input");
  } catch (const rankwise::CheckpointError&) {
    return 0;
  }
  std::string again;
  try {
    again = rankwise::checkpoint::pickle::adapt_python_pickle(rewritten.data(), rewritten.size(), "rewritten");
  } catch (const rankwise::CheckpointError& e) {
    std::fprintf(stderr, "the rewrite rejects its own output: %s\n", e.what());
    std::abort();
  }
  if (again != rewritten) {
    std::fprintf(stderr, "the rewrite of a rewritten pickle changed it again\n");
    std::abort();
  }
  unpickle(rewritten);
  return 0;
}
