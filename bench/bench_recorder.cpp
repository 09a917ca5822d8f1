// What the flight recorder, the progress thread and debug mode cost per
// collective: rankwise's all_reduce (recorded, progress published, checked
// in debug mode) against c10d's own allreduce on the same ProcessGroupGloo
// (what PyTorch's C++ core does for dist.all_reduce, with nothing recorded),
// interleaved in rounds so that drift hits each side alike. Prints on rank 0:
//   recorder bytes=<B> calls=<N> c10d_us=<a> rankwise_us=<b> debug_us=<c> recorder_ratio=<b/a> debug_ratio=<c/a> record_ns=<d> heartbeat_ns=<e> clock_ns=<f>
// (medians over rounds of the mean per call; record_ns: one enter() and
// end() of a record like DDP's, on a recorder of 2000 entries, alone, so
// free of the collective's noise; heartbeat_ns: one
// rankwise::monitor::record_step, which a DDP step under a Fabric makes once;
// clock_ns: one begin() and end() of the collective clock, which every
// recorded collective makes, both alone). Usage: bench_recorder BYTES
// CALLS ROUNDS, through rankwise-run with 2 ranks.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "diag/collective_clock.h"
#include "rankwise/rankwise.h"

namespace {

double mean_us(int64_t calls, const std::function<void()>& call) {
  rankwise::dist::barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i) call();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
         static_cast<double>(calls);
}

// Nanoseconds per call of `call`, median of `rounds` rounds of 100,000.
double ns_per_call(int rounds, const std::function<void(int64_t)>& call) {
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    const int64_t n = 100000;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) call(i);
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
                     .count() /
                 static_cast<double>(n));
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: bench_recorder BYTES CALLS ROUNDS\n");
    return 2;
  }
  const int64_t bytes = std::stoll(argv[1]);
  const int64_t calls = std::stoll(argv[2]);
  const int rounds = std::stoi(argv[3]);
  torch::set_num_threads(1);
  auto& group = rankwise::dist::init();
  auto tensor = torch::ones({std::max<int64_t>(1, bytes / 4)}, torch::kFloat32);
  std::vector<torch::Tensor> tensors{tensor};
  const auto raw = [&] { group.c10d_group()->allreduce(tensors)->wait(); };
  const auto recorded = [&] { group.all_reduce(tensor); };
  for (int i = 0; i < 50; ++i) {
    raw();
    recorded();
  }
  std::vector<double> c10d, rankwise_us, debug;
  for (int r = 0; r < rounds; ++r) {
    c10d.push_back(mean_us(calls, raw));
    rankwise_us.push_back(mean_us(calls, recorded));
    group.set_check_collectives(true);
    debug.push_back(mean_us(calls, recorded));
    group.set_check_collectives(false);
  }
  // The recorder alone: a record as DDP's gradient all_reduce makes it.
  std::vector<double> record_ns;
  {
    rankwise::diag::FlightRecorder recorder(2000);
    rankwise::diag::CollectiveRecord call;
    call.operation = "all_reduce";
    call.dtype = "Float";
    call.sizes = {tensor.numel()};
    call.reduce_op = "sum";
    call.file = __FILE__;
    call.line = __LINE__;
    for (int r = 0; r < rounds; ++r) {
      const int64_t n = 100000;
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; ++i) {
        auto record = call;
        record.name = "DistributedDataParallel step " + std::to_string(i) + ": gradients";
        recorder.end(recorder.enter(std::move(record)), true);
      }
      record_ns.push_back(
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
          static_cast<double>(n));
    }
  }
  // Heartbeats: what a training step and a collective add.
  const double heartbeat_ns =
      ns_per_call(rounds, [](int64_t) { rankwise::monitor::record_step(64, 0.5); });
  rankwise::diag::CollectiveClock clock;
  const double clock_ns = ns_per_call(rounds, [&](int64_t i) {
    clock.begin(static_cast<uint64_t>(i));
    clock.end(static_cast<uint64_t>(i));
  });
  if (group.rank() == 0) {
    const double a = median(c10d), b = median(rankwise_us), c = median(debug);
    std::printf("recorder bytes=%lld calls=%lld c10d_us=%.1f rankwise_us=%.1f debug_us=%.1f "
                "recorder_ratio=%.3f debug_ratio=%.3f record_ns=%.0f heartbeat_ns=%.0f "
                "clock_ns=%.0f\n",
                static_cast<long long>(bytes), static_cast<long long>(calls), a, b, c, b / a, c / a,
                median(record_ns), heartbeat_ns, clock_ns);
  }
  return 0;
}
