// bench_checkpoint: throughput of rankwise::checkpoint::save and rankwise::checkpoint::load on a
// model-like state of float32 tensors; bench/checkpoint_reference.py is the
// same state through Python's torch.save / torch.load.
//
// Usage: bench_checkpoint SIZE_MIB DIR TRIALS [save|load|async]
// (the optional last argument runs one phase only, e.g. under perf; load
// then saves once, untimed, first). `async` (bench/run_async_save.sh) times
// what a CheckpointManager's save_async blocks the caller for, against its
// save and a plain memcpy of every tensor into buffers allocated once (the
// floor): each trial, once the previous save is done and sync(2)ed and one
// untimed memcpy has run, times the memcpy, then save_async, in the same
// state of the machine. Reports
// how much the asynchronous saves raised the process's peak resident memory
// (VmHWM) beyond the state and the floor's buffers.
// The state (same layout as the Python reference): for i in 0..SIZE_MIB/16-1,
// "layers.<i>.weight" [1024, 4096] (16 MiB) and "layers.<i>.bias" [4096]
// (16 KiB); the last weight has fewer rows so that the tensors total exactly
// SIZE_MIB MiB; plus "step" (an int). torch::rand with seed 0.
//
// Every series starts with one untimed warm-up (on this VM the first touch
// of fresh memory or page cache costs several times the steady state; the
// warm-up's time is printed to stderr). Each save trial: unlink DIR/rw.pt and
// sync(2) (untimed, so that no earlier trial's write-back competes), then
// time rankwise::checkpoint::save (temp file, CRC-32, fsync, rename, directory fsync).
// Each load trial times rankwise::checkpoint::load (CRC-32 verified, then unpickled) of
// the file just written, read from the page cache (warm) as in the Python
// reference; the previous trial's result is freed before, untimed. Whether
// the tensors land in fresh or reused memory is glibc's choice:
// bench/run_checkpoint.sh fixes it with GLIBC_TUNABLES for both sides. Also
// times the CRC-32 pass of the load alone (rankwise::checkpoint::verify). Prints one
// `key=value` line per figure, MiB of tensor data per second, median of
// TRIALS; per-trial seconds go to stderr.
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/manager.h"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kCols = 4096;         // floats per row: 16 KiB
constexpr int64_t kRowsPerWeight = 1024;  // 16 MiB per weight

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

rankwise::checkpoint::Checkpoint make_state(int64_t size_mib) {
  torch::manual_seed(0);
  const int64_t layers = std::max<int64_t>(1, size_mib / 16);
  const int64_t total_floats = size_mib * kMiB / 4;
  // Rows left for the last weight once every bias and the other weights are counted.
  const int64_t last_rows = (total_floats - layers * kCols) / kCols - (layers - 1) * kRowsPerWeight;
  rankwise::checkpoint::Checkpoint state;
  for (int64_t i = 0; i < layers; ++i) {
    const int64_t rows = i + 1 == layers ? last_rows : kRowsPerWeight;
    const std::string prefix = "layers." + std::to_string(i);
    state.insert(prefix + ".weight", torch::rand({rows, kCols}));
    state.insert(prefix + ".bias", torch::rand({kCols}));
  }
  state.insert("step", int64_t{1000});
  return state;
}

// This process's peak resident memory so far (VmHWM), in MiB.
double peak_resident_mib() {
  double kib = 0;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
    }
    std::fclose(f);
  }
  return kib / 1024;
}

// The `async` phase: milliseconds (median of `trials` after a warm-up) of a
// memcpy of the state, of save_async's blocking, and of save.
void bench_async(const rankwise::checkpoint::Checkpoint& state, const std::string& dir, int trials) {
  std::vector<torch::Tensor> sources, buffers;
  for (const auto& entry : state.dict()) {
    if (!entry.value().isTensor()) continue;
    sources.push_back(entry.value().toTensor());
    buffers.push_back(torch::empty_like(sources.back()));
    buffers.back().fill_(0);  // touched: the floor pays no first-touch faults
  }
  auto ms = [](std::vector<double> v, const char* name) {  // per-trial seconds to stderr
    std::fprintf(stderr, "rankwise %s seconds: (warm-up %.3f)", name, v.front());
    for (std::size_t i = 1; i < v.size(); ++i) std::fprintf(stderr, " %.3f", v[i]);
    std::fprintf(stderr, "\n");
    v.erase(v.begin());
    return median(v) * 1000;
  };
  // Each trial after the previous save is done and synced: one untimed
  // memcpy (the first pass over memory after a write of the state's size
  // pays the kernel's catching up, 0.1-0.2 s here, whoever makes it), then
  // the timed memcpy, then save_async: both in the same state of the machine.
  rankwise::checkpoint::CheckpointManager async(rankwise::checkpoint::CheckpointManagerOptions(dir + "/async").keep_last(1));
  std::vector<double> copies, blocks;
  const double before = peak_resident_mib();
  for (int t = 0; t <= trials; ++t) {
    async.wait();
    ::sync();
    auto copy = [&] {
      for (std::size_t i = 0; i < sources.size(); ++i) {
        std::memcpy(buffers[i].data_ptr(), sources[i].data_ptr(), sources[i].nbytes());
      }
    };
    copy();
    copies.push_back(seconds(copy));
    blocks.push_back(seconds([&] { async.save_async(state, t + 1); }));
  }
  async.wait();
  const double extra_mib = peak_resident_mib() - before;  // the floor's buffers came before
  async.clear();
  buffers.clear();
  rankwise::checkpoint::CheckpointManager sync(rankwise::checkpoint::CheckpointManagerOptions(dir + "/sync").keep_last(1));
  std::vector<double> saves;
  for (int t = 0; t <= trials; ++t) {
    ::sync();
    saves.push_back(seconds([&] { sync.save(state, t + 1); }));
  }
  sync.clear();
  std::printf("memcpy_ms=%.2f\nasync_block_ms=%.2f\nsync_save_ms=%.2f\nasync_extra_mib=%.1f\n", ms(copies, "memcpy"),
              ms(blocks, "save_async"), ms(saves, "save"), extra_mib);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: bench_checkpoint SIZE_MIB DIR TRIALS [save|load|async]\n");
    return 2;
  }
  const int64_t size_mib = std::atoll(argv[1]);
  const std::string path = std::string(argv[2]) + "/rw.pt";
  const int trials = std::max(1, std::atoi(argv[3]));
  const std::string phase = argc == 5 ? argv[4] : "all";
  if (size_mib < 16 || size_mib % 16 != 0 || (phase != "all" && phase != "save" && phase != "load" && phase != "async")) {
    std::fprintf(stderr, "bench_checkpoint: SIZE_MIB must be a multiple of 16; phase save, load or async\n");
    return 2;
  }

  const rankwise::checkpoint::Checkpoint state = make_state(size_mib);
  double tensor_bytes = 0;
  for (const auto& entry : state.dict()) {
    if (entry.value().isTensor()) tensor_bytes += entry.value().toTensor().nbytes();
  }
  const double mib = tensor_bytes / kMiB;
  std::printf("rankwise size_mib=%.1f trials=%d\n", mib, trials);

  // Runs before() untimed, then times f(); 1 + trials times (the first is the warm-up).
  auto series = [&](auto&& before, auto&& f) {
    std::vector<double> v;
    for (int t = 0; t <= trials; ++t) {
      before();
      v.push_back(seconds(f));
    }
    return v;
  };
  auto report = [&](const char* name, std::vector<double> v) {
    std::fprintf(stderr, "rankwise %s seconds: (warm-up %.3f)", name, v.front());
    v.erase(v.begin());
    for (double s : v) std::fprintf(stderr, " %.3f", s);
    std::fprintf(stderr, "\n");
    std::printf("%s_mib_per_s=%.1f\n", name, mib / median(v));
  };
  auto nothing = [] {};
  if (phase == "async") {
    bench_async(state, argv[2], trials);
    return 0;
  }

  if (phase != "load") {
    report("save", series(
                       [&] {
                         ::unlink(path.c_str());
                         ::sync();
                       },
                       [&] { rankwise::checkpoint::save(path, state); }));
  } else {
    rankwise::checkpoint::save(path, state);
  }
  if (phase != "save") {
    rankwise::checkpoint::Checkpoint back;  // freed before the next trial, untimed (as in Python)
    auto load_s = series([&] { back = rankwise::checkpoint::Checkpoint(); },
                         [&] { back = rankwise::checkpoint::load(path); });
    if (back.keys().size() != state.keys().size()) std::abort();
    back = rankwise::checkpoint::Checkpoint();
    auto verify_s = series(nothing, [&] {
      if (!rankwise::checkpoint::verify(path)) std::abort();
    });
    report("load", load_s);
    report("verify", verify_s);
  }
  ::unlink(path.c_str());
  ::unlink((path + ".lock").c_str());  // left by rankwise::checkpoint::save's flock
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
  return 1;
}
