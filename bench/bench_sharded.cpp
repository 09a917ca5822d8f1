// bench_sharded: sharded checkpoints (rankwise::checkpoint::save_sharded / load_sharded)
// on a model-like state; bench/sharded_reference.py is the same state through
// Python's torch.distributed.checkpoint (DCP). Run through rankwise-run.
//
// Usage: bench_sharded SIZE_MIB DIR TRIALS save   (2 ranks or more)
//        bench_sharded SIZE_MIB DIR 1 load        (any world size)
//        bench_sharded SIZE_MIB DIR TRIALS async  (2 ranks or more; see run_async)
// The state: for i in 0..SIZE_MIB/16-1, "layers.<i>.weight" [1024, 4096]
// float32 (16 MiB), sharded by rows (shard_rows: torch.chunk's pieces), where
// element e of layer i holds float(e + i) (exact in float32: e < 2^22), so
// each rank builds only its own rows and a load can check every value.
//
// save: TRIALS times (after one untimed warm-up of each), alternating:
//   sharded:  save_sharded(DIR/sharded): every rank writes its own rows;
//   gathered: the same state gathered onto rank 0 (all_gather, layer by
//             layer) and written by rank 0 with rankwise::checkpoint::save(DIR/gathered.pt),
//             the replicated alternative; the gather is timed with it.
// Before each trial rank 0 removes the previous output and runs sync(2),
// untimed; each time runs from a barrier to a barrier (the slowest rank).
// Memory, per rank: what a save adds to the process's resident set at its
// peak: /proc/self/status VmHWM after the save minus VmRSS just before it,
// the peak having been reset to the current RSS there (malloc_trim(0), then
// write "5" to /proc/self/clear_refs); the shard is resident before the save.
// The largest over every save, the warm-up included.
// Also printed: RSS before the state was built (libraries, process group)
// and after the saves (with the shard and whatever malloc kept), for scale.
// Leaves DIR/sharded for `load`.
//
// load: load_sharded(DIR/sharded) into zeros sharded by rows at this world
// size (resharding when it differs from the save's); counts the bytes this
// rank read (/proc/self/io rchar, every read(2)/pread(2), page cache or
// disk, before and after) against the bytes of its chunks, times it, and
// checks every value.
//
// Rank 0 prints `key=value` lines (MiB of tensor data per second: medians of
// TRIALS; memory in MiB; per rank where the ranks differ); per-trial seconds
// go to stderr.
#include <torch/torch.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "rankwise/rankwise.h"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kCols = 4096;
constexpr int64_t kRows = 1024;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A field of /proc/self/status in kB ("VmRSS", "VmHWM"), as MiB.
double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  }
  throw std::runtime_error("bench_sharded: no " + field + " in /proc/self/status");
}

// Returns the heap's free memory to the system (so a save cannot reuse
// memory an earlier one left resident, which would hide what it needs), then
// resets the peak resident set (VmHWM) to the current one; returns that, MiB.
double reset_peak() {
  ::malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  return status_mib("VmRSS");
}

// Bytes this process has read through read(2)/pread(2): /proc/self/io rchar.
int64_t rchar() {
  std::ifstream in("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "rchar:") return value;
  }
  throw std::runtime_error("bench_sharded: no rchar in /proc/self/io");
}

std::string key_of(int64_t layer) { return "layers." + std::to_string(layer) + ".weight"; }

// Layer `layer`'s rows [begin, end): element e holds float(e + layer).
torch::Tensor rows_of(int64_t layer, int64_t begin, int64_t end) {
  return (torch::arange(begin * kCols, end * kCols, torch::kInt64) + layer)
      .to(torch::kFloat32)
      .reshape({end - begin, kCols});
}

rankwise::checkpoint::ShardedState make_state(int64_t layers, int rank, int world) {
  rankwise::checkpoint::ShardedState state;
  for (int64_t i = 0; i < layers; ++i) {
    const auto [begin, end] = rankwise::checkpoint::chunk_range(kRows, rank, world);
    state.emplace(key_of(i), rankwise::checkpoint::ShardedTensor({kRows, kCols}, torch::kFloat32,
                                                     {{{begin, 0}, rows_of(i, begin, end)}}));
  }
  return state;
}

template <class F>
double timed(F&& f) {
  rankwise::dist::barrier();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  rankwise::dist::barrier();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every rank's `value`, on every rank.
std::vector<double> per_rank(double value) {
  auto all = rankwise::dist::all_gather(torch::tensor({value}, torch::kFloat64));
  std::vector<double> out;
  for (const auto& t : all) out.push_back(t.item<double>());
  return out;
}

std::string joined(const std::vector<double>& v, const char* format = "%.1f") {
  std::string out;
  char buf[64];
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, format, v[i]);
    out += (i ? "," : "") + std::string(buf);
  }
  return out;
}

// The largest of every rank's `value`, on every rank.
double slowest(double value) {
  const auto all = per_rank(value);
  return *std::max_element(all.begin(), all.end());
}

// async: what ShardedCheckpointManager::save_async blocks each rank for
// (the slowest rank's, ms), against a memcpy of the rank's shard into
// buffers allocated once (the floor) and a synchronous save() of the same
// state through the same manager. Before each timed call the previous
// save is published (wait(), untimed) and rank 0 runs sync(2), so that
// save_async has nothing to wait for. Trial 0 is a warm-up (save_async's
// first call allocates its buffers). Also the steady state: a save_async
// called while that one is in flight blocks for its wait for the write,
// then the ranks' agreement on the previous save and its own begin and
// copy (one storage node: the previous save is published on the writer
// thread); less the wait (the slowest rank's), that is next_call_ms.
// async_extra_mib: what every save of the run (async and sync) added to the
// peak resident memory of the rank that added most. Prints memcpy_ms, async_block_ms,
// next_call_ms and sync_save_ms (medians of TRIALS, the slowest rank's) on
// rank 0.
int run_async(const rankwise::checkpoint::ShardedState& state, const std::string& dir, int trials, int rank) {
  std::vector<torch::Tensor> buffers;
  for (const auto& [key, entry] : state) {
    for (const auto& c : std::get<rankwise::checkpoint::ShardedTensor>(entry).chunks()) {
      buffers.push_back(torch::empty_like(c.data));
    }
  }
  auto copy = [&] {
    std::size_t i = 0;
    for (const auto& [key, entry] : state) {
      for (const auto& c : std::get<rankwise::checkpoint::ShardedTensor>(entry).chunks()) {
        std::memcpy(buffers[i++].data_ptr(), c.data.data_ptr(), c.data.nbytes());
      }
    }
  };
  rankwise::checkpoint::ShardedCheckpointManager manager(
      rankwise::checkpoint::CheckpointManagerOptions(dir + "/async").keep_last(2));
  std::vector<double> copies, blocks, saves, next_calls;
  auto settled = [&] {
    manager.wait();
    if (rank == 0) ::sync();
    rankwise::dist::barrier();
  };
  // A save_async right after another: what it blocks for less its wait for
  // the previous write, i.e. the agreement on the previous save, then its
  // own begin and copy (the steady state of saving often).
  auto next_call = [&](int64_t step) {
    manager.save_async(state, step);
    const auto t = manager.last_timings();
    // A rank whose write ended first waits for the others' in the agreement: the wait is the
    // slowest rank's.
    return slowest(t.blocked_ms) - slowest(t.waited_ms);
  };
  auto ms_of = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  copy();  // the floor's buffers resident before the peak is reset
  const double before = reset_peak();
  for (int t = 0; t <= trials; ++t) {
    settled();
    copies.push_back(slowest(ms_of(copy)));
    settled();
    blocks.push_back(slowest(ms_of([&] { manager.save_async(state, 3 * t + 1); })));
    next_calls.push_back(next_call(3 * t + 2));
    settled();
    saves.push_back(slowest(ms_of([&] { manager.save(state, 3 * t + 3); })));
  }
  manager.wait();
  const double extra_mib = slowest(status_mib("VmHWM") - before);
  if (rank == 0) {
    std::fprintf(stderr, "save_async blocking ms (warm-up %.1f):", blocks.front());
    for (std::size_t i = 1; i < blocks.size(); ++i) std::fprintf(stderr, " %.1f", blocks[i]);
    std::fprintf(stderr, "\n");
  }
  for (auto* v : {&copies, &blocks, &saves, &next_calls}) v->erase(v->begin());
  if (rank == 0) {
    std::printf("memcpy_ms=%.2f\nasync_block_ms=%.2f\nsync_save_ms=%.2f\nnext_call_ms=%.2f\nasync_extra_mib=%.1f\n",
                median(copies), median(blocks), median(saves), median(next_calls), extra_mib);
  }
  return 0;  // DIR/async is the caller's to remove
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 5) {
    std::fprintf(stderr, "usage: bench_sharded SIZE_MIB DIR TRIALS save|load|async\n");
    return 2;
  }
  const int64_t size_mib = std::atoll(argv[1]);
  const std::string dir = argv[2];
  const int trials = std::max(1, std::atoi(argv[3]));
  const std::string mode = argv[4];
  if (size_mib < 16 || size_mib % 16 != 0 || (mode != "save" && mode != "load" && mode != "async")) {
    std::fprintf(stderr, "bench_sharded: SIZE_MIB must be a multiple of 16; mode save, load or async\n");
    return 2;
  }
  torch::set_num_threads(1);
  rankwise::dist::init();
  const int rank = rankwise::dist::rank();
  const int world = rankwise::dist::world_size();
  const int64_t layers = size_mib / 16;
  const double mib = static_cast<double>(size_mib);
  const std::string sharded_dir = dir + "/sharded";
  const double base = status_mib("VmRSS");
  rankwise::checkpoint::ShardedState state = make_state(layers, rank, world);
  double shard_mib = 0;
  for (const auto& [key, entry] : state) {
    for (const auto& c : std::get<rankwise::checkpoint::ShardedTensor>(entry).chunks()) shard_mib += c.data.nbytes() / double(kMiB);
  }

  if (mode == "load") {
    const int64_t before = rchar();
    const double s = timed([&] { rankwise::checkpoint::load_sharded(sharded_dir, state); });
    const double read_mib = (rchar() - before) / double(kMiB);
    for (int64_t i = 0; i < layers; ++i) {
      const auto& chunk = std::get<rankwise::checkpoint::ShardedTensor>(state.at(key_of(i))).chunks()[0];
      const int64_t begin = chunk.offsets[0];
      if (!torch::equal(chunk.data, rows_of(i, begin, begin + chunk.data.size(0)))) {
        std::fprintf(stderr, "bench_sharded: rank %d: %s differs after the load\n", rank, key_of(i).c_str());
        return 1;
      }
    }
    const auto needed = per_rank(shard_mib), read = per_rank(read_mib);
    std::vector<double> ratio;
    for (std::size_t r = 0; r < needed.size(); ++r) ratio.push_back(needed[r] > 0 ? read[r] / needed[r] : 0);
    if (rank == 0) {
      std::printf("world=%d load_mib_per_s=%.1f\n", world, mib / s);
      std::printf("needed_mib=%s\nread_mib=%s\nread_over_needed=%s\n", joined(needed).c_str(), joined(read).c_str(),
                  joined(ratio, "%.3f").c_str());
      std::printf("read_over_needed_max=%.3f\n", *std::max_element(ratio.begin(), ratio.end()));
    }
    return 0;
  }

  if (world < 2) {
    std::fprintf(stderr, "bench_sharded: save needs 2 ranks or more (rankwise-run --nproc-per-node 2)\n");
    return 2;
  }
  if (mode == "async") return run_async(state, dir, trials, rank);
  const std::string gathered_path = dir + "/gathered.pt";
  auto clean = [&](const std::string& path) {  // the output about to be written
    if (rank == 0) {
      std::filesystem::remove_all(path);
      ::sync();
    }
  };
  auto sharded = [&] { rankwise::checkpoint::save_sharded(sharded_dir, state); };
  auto gathered = [&] {
    rankwise::checkpoint::Checkpoint full;
    for (int64_t i = 0; i < layers; ++i) {
      const auto& chunk = std::get<rankwise::checkpoint::ShardedTensor>(state.at(key_of(i))).chunks()[0];
      auto pieces = rankwise::dist::all_gather(chunk.data);
      if (rank == 0) full.insert(key_of(i), torch::cat(pieces));
    }
    rankwise::checkpoint::save(gathered_path, full);  // collective: rank 0 writes its `full`, the others wait
  };
  std::vector<double> sharded_s, gathered_s, sharded_peak, gathered_peak;
  for (int t = 0; t <= trials; ++t) {  // trial 0 is the warm-up
    clean(sharded_dir);
    double before = reset_peak();
    sharded_s.push_back(timed(sharded));
    sharded_peak.push_back(status_mib("VmHWM") - before);
    clean(gathered_path);
    before = reset_peak();
    gathered_s.push_back(timed(gathered));
    gathered_peak.push_back(status_mib("VmHWM") - before);
  }
  std::filesystem::remove(gathered_path);
  std::filesystem::remove(gathered_path + ".lock");
  auto report = [&](const char* name, std::vector<double> v) {
    if (rank == 0) {
      std::fprintf(stderr, "rankwise %s seconds: (warm-up %.3f)", name, v.front());
      for (std::size_t i = 1; i < v.size(); ++i) std::fprintf(stderr, " %.3f", v[i]);
      std::fprintf(stderr, "\n");
    }
    v.erase(v.begin());
    return mib / median(v);
  };
  const double sharded_rate = report("sharded save", sharded_s);
  const double gathered_rate = report("gathered save", gathered_s);
  // Memory added at the peak: the largest over every save (the warm-up's included), per rank.
  const auto shard = per_rank(shard_mib);
  const auto speak = per_rank(*std::max_element(sharded_peak.begin(), sharded_peak.end()));
  const auto gpeak = per_rank(*std::max_element(gathered_peak.begin(), gathered_peak.end()));
  const auto bases = per_rank(base), held = per_rank(status_mib("VmRSS"));
  if (rank == 0) {
    std::printf("sharded_mib_per_s=%.1f\ngathered_mib_per_s=%.1f\n", sharded_rate, gathered_rate);
    std::printf("base_rss_mib=%s\nheld_rss_mib=%s\nshard_mib=%s\nsharded_added_mib=%s\ngathered_added_mib=%s\n",
                joined(bases).c_str(), joined(held).c_str(), joined(shard).c_str(), joined(speak).c_str(),
                joined(gpeak).c_str());
    std::printf("sharded_added_mib_max=%.1f\n", *std::max_element(speak.begin(), speak.end()));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_sharded: %s\n", e.what());
  return 1;
}
