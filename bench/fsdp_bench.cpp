// Fully sharded training against DDP and ZeRO-1 (bench/run_fsdp.sh, issue 48).
// Run through rankwise-run. Two modes:
//
//   fsdp_bench train STRATEGY BLOCKS WIDTH BATCH STEPS WARMUP
//     A torch::nn::Sequential of BLOCKS Linear(WIDTH, WIDTH) (seed 0, the same
//     on every rank; each Linear one unit under fsdp), trained with Adam
//     (lr 1e-3) on an MSE loss, BATCH rows per rank, WARMUP untimed steps then
//     STEPS timed ones (between barriers), 1 intra-op thread. STRATEGY:
//       ddp              DistributedDataParallel (defaults) + torch::optim::Adam
//       zero1            DistributedDataParallel + ZeroRedundancyOptimizer(Adam)
//       fsdp             FullyShardedDataParallel (ZeRO-3, prefetch on)
//       fsdp-noprefetch  the same with FullyShardOptions().prefetch(false)
//       fsdp-zero2       FullyShardOptions().reshard_after_forward(false)
//     Memory (VmHWM of /proc/self/status): `base` right after dist::init; `startup`
//     right after building the model, wrapping it and building the optimizer;
//     then VmHWM is reset (echo 5 > /proc/self/clear_refs) and `train` is the
//     peak of the WARMUP + STEPS steps alone. Rank 0 prints key=value lines,
//     per-rank lists "r0,r1,..." and their max:
//       base_hwm_mib= startup_mib= train_mib= (the last two minus base)
//       hwm_reset=ok|failed (failed: train_mib includes the start-up peak)
//       last_forward_backward_added_mib= (the last step's forward and backward
//       alone: their peak minus the RSS before them; VmHWM reset once more)
//       samples_per_s= (STEPS * BATCH * W / the timed steps' seconds)
//       lo_bytes_per_step= (every rank's loopback bytes during the timed steps
//       over STEPS: the machine's whole lo counter, so run alone)
//       fsdp: units= all_gathers= reduce_scatters= max_units_gathered= gathered_high_water_mib=
//
//   fsdp_bench collectives ELEMENTS REPS
//     The engine's two collectives (src/compat/sharded_collectives.h) on one
//     unit's buffer of ELEMENTS float32 (padded to W rows): all_gather_flat,
//     reduce_scatter_sum (on libtorch 1.x an all_reduce of the whole buffer)
//     and, for scale, a plain all_reduce of the same buffer; REPS timed calls
//     each after 2 untimed, interleaved. Rank 0 prints
//       all_gather_ms= reduce_scatter_ms= all_reduce_ms= (mean per call)
//       all_gather_lo_bytes= reduce_scatter_lo_bytes= all_reduce_lo_bytes= (per call, all ranks)
//       reduce_scatter_is_all_reduce=0|1
#include <torch/torch.h>

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "compat/sharded_collectives.h"
#include "rankwise/rankwise.h"
#include "rankwise/parallel/fully_sharded.h"

namespace {

namespace nn = torch::nn;
namespace par = rankwise::parallel;
using Clock = std::chrono::steady_clock;

// A field of /proc/self/status in kB ("VmHWM", "VmRSS").
int64_t status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false when it did not.
bool reset_hwm() {
  {
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    if (!out.flush()) return false;
  }
  return status_kb("VmHWM") <= status_kb("VmRSS") + 1024;
}

// Bytes sent on the loopback interface so far (every process on the machine).
int64_t lo_bytes() {
  std::ifstream in("/proc/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != "lo") continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t v = 0;
    for (int i = 0; i < 9; ++i) fields >> v;  // rx: 8 fields, then tx bytes
    return v;
  }
  return -1;
}

// Every rank's value, on every rank.
std::vector<double> per_rank(double value) {
  auto t = torch::zeros({rankwise::dist::world_size()}, torch::kFloat64);
  t[rankwise::dist::rank()] = value;
  rankwise::dist::all_reduce(t);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::string list_and_max(const std::vector<double>& values, int precision = 1) {
  std::string out;
  double max = 0;
  for (double v : values) {
    out += (out.empty() ? "" : ",") + fmt::format("{:.{}f}", v, precision);
    max = std::max(max, v);
  }
  return fmt::format("{} max={:.{}f}", out, max, precision);
}

double mib(int64_t kb) { return static_cast<double>(kb) / 1024.0; }

int train(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: fsdp_bench train ddp|zero1|fsdp|fsdp-noprefetch|fsdp-zero2 BLOCKS WIDTH "
                 "BATCH STEPS WARMUP\n");
    return 2;
  }
  const std::string strategy = argv[2];
  const int64_t blocks = std::stoll(argv[3]), width = std::stoll(argv[4]), batch = std::stoll(argv[5]);
  const int64_t steps = std::stoll(argv[6]), warmup = std::stoll(argv[7]);
  torch::set_num_threads(1);
  auto& group = rankwise::dist::init();
  const int64_t base_kb = status_kb("VmHWM");

  torch::manual_seed(0);
  nn::Sequential net;
  for (int64_t i = 0; i < blocks; ++i) net->push_back(nn::Linear(width, width));

  std::optional<par::DistributedDataParallel<nn::Sequential>> ddp;
  std::optional<par::FullyShardedDataParallel<nn::Sequential>> fsdp;
  std::unique_ptr<torch::optim::Optimizer> adam;
  std::optional<par::ZeroRedundancyOptimizer> zero;
  const auto adam_options = torch::optim::AdamOptions(1e-3);
  if (strategy == "ddp" || strategy == "zero1") {
    ddp.emplace(net);
    if (strategy == "zero1") {
      zero.emplace(ddp->parameters(), [&](std::vector<torch::optim::OptimizerParamGroup> groups) {
        return std::make_unique<torch::optim::Adam>(std::move(groups), adam_options);
      });
    } else {
      adam = std::make_unique<torch::optim::Adam>(ddp->parameters(), adam_options);
    }
  } else if (strategy.rfind("fsdp", 0) == 0) {
    auto options = par::FullyShardOptions()
                       .prefetch(strategy != "fsdp-noprefetch")
                       .reshard_after_forward(strategy != "fsdp-zero2");
    fsdp.emplace(net, options);
    adam = std::make_unique<torch::optim::Adam>(fsdp->parameters(), adam_options);
  } else {
    std::fprintf(stderr, "fsdp_bench: unknown strategy '%s'\n", strategy.c_str());
    return 2;
  }
  const int64_t startup_kb = status_kb("VmHWM");
  const bool reset_ok = reset_hwm();

  torch::manual_seed(1 + group.rank());
  const auto x = torch::randn({batch, width});
  const auto y = torch::randn({batch, width});
  // The last step's forward + backward alone (VmHWM reset before it, the peak
  // so far kept): what they add to the resident memory before them.
  int64_t peak_before_probe_kb = 0, probe_rss_kb = 0, probe_hwm_kb = 0;
  auto step = [&](bool probe) {
    if (zero) {
      zero->zero_grad();
    } else {
      adam->zero_grad();
    }
    if (probe) {
      peak_before_probe_kb = status_kb("VmHWM");
      reset_hwm();
      probe_rss_kb = status_kb("VmRSS");
    }
    const auto out = fsdp ? fsdp->forward(x) : ddp->forward(x);
    torch::mse_loss(out, y).backward();
    if (probe) probe_hwm_kb = status_kb("VmHWM");
    if (zero) {
      zero->step();
    } else {
      adam->step();
    }
  };
  const int64_t total = warmup + steps;
  for (int64_t i = 0; i < warmup; ++i) step(reset_ok && total >= 2 && i == total - 1);
  rankwise::dist::barrier();
  const int64_t lo_start = lo_bytes();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step(reset_ok && total >= 2 && warmup + i == total - 1);
  rankwise::dist::barrier();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const int64_t lo_end = lo_bytes();
  const int64_t train_kb = std::max(status_kb("VmHWM"), peak_before_probe_kb);

  const auto base = per_rank(mib(base_kb));
  const auto startup = per_rank(mib(startup_kb - base_kb));
  const auto trained = per_rank(mib(train_kb - base_kb));
  const auto resets = per_rank(reset_ok ? 1 : 0);
  const auto backward_added = per_rank(mib(probe_hwm_kb - probe_rss_kb));
  const bool all_reset = std::all_of(resets.begin(), resets.end(), [](double v) { return v == 1; });
  const int world = group.world_size();
  rankwise::print0("strategy={} world={} blocks={} width={} batch={} steps={} warmup={} torch={}", strategy,
                   world, blocks, width, batch, steps, warmup, TORCH_VERSION);
  rankwise::print0("base_hwm_mib={}", list_and_max(base));
  rankwise::print0("startup_mib={}", list_and_max(startup));
  rankwise::print0("train_mib={}", list_and_max(trained));
  rankwise::print0("hwm_reset={}", all_reset ? "ok" : "failed");
  if (all_reset && total >= 2) rankwise::print0("last_forward_backward_added_mib={}", list_and_max(backward_added));
  rankwise::print0("samples_per_s={:.1f}", steps > 0 ? static_cast<double>(steps * batch * world) / seconds : 0.0);
  rankwise::print0("lo_bytes_per_step={:.0f}",
                   steps > 0 ? static_cast<double>(lo_end - lo_start) / static_cast<double>(steps) : 0.0);
  if (fsdp) {
    const auto s = fsdp->stats();
    rankwise::print0("units={} all_gathers={} reduce_scatters={} max_units_gathered={} gathered_high_water_mib={:.1f}",
                     s.units, s.all_gathers, s.reduce_scatters, s.max_units_gathered,
                     static_cast<double>(s.gathered_bytes_high_water) / (1 << 20));
  }
  return 0;
}

int collectives(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fsdp_bench collectives ELEMENTS REPS\n");
    return 2;
  }
  const int64_t elements = std::stoll(argv[2]);
  const int reps = std::stoi(argv[3]);
  torch::set_num_threads(1);
  auto& group = rankwise::dist::init();
  auto& pg = *group.c10d_group();
  const int world = group.world_size(), rank = group.rank();
  const int64_t shard_numel = (elements + world - 1) / world;
  auto shard = torch::randn({shard_numel});
  auto gathered = torch::empty({shard_numel * world});
  auto grads = torch::randn({shard_numel * world});
  auto all_gather = [&] {
    auto work = rankwise::compat::all_gather_flat(pg, gathered, shard);
    work->wait();
  };
  auto reduce_scatter = [&] {
    auto [work, out] = rankwise::compat::reduce_scatter_sum(pg, grads, rank, world);
    work->wait();
  };
  auto all_reduce = [&] {
    std::vector<torch::Tensor> tensors{grads};
    pg.allreduce(tensors)->wait();
  };
  struct Side {
    const char* name;
    std::function<void()> run;
    double seconds = 0;
    int64_t bytes = 0;
  };
  std::vector<Side> sides{{"all_gather", all_gather}, {"reduce_scatter", reduce_scatter}, {"all_reduce", all_reduce}};
  for (auto& side : sides) {
    side.run();
    side.run();
  }
  for (int i = 0; i < reps; ++i) {
    for (auto& side : sides) {
      rankwise::dist::barrier();
      const int64_t lo = lo_bytes();
      const auto start = Clock::now();
      side.run();
      side.seconds += std::chrono::duration<double>(Clock::now() - start).count();
      rankwise::dist::barrier();
      side.bytes += lo_bytes() - lo;
    }
  }
  for (auto& side : sides) {
    const auto times = per_rank(side.seconds);
    side.seconds = *std::max_element(times.begin(), times.end());
  }
  rankwise::print0("elements={} world={} reps={} torch={} buffer_mib={:.2f}", elements, world, reps,
                   TORCH_VERSION, static_cast<double>(shard_numel * world * 4) / (1 << 20));
  rankwise::print0("reduce_scatter_is_all_reduce={}", rankwise::compat::reduce_scatter_is_all_reduce() ? 1 : 0);
  std::string ms, bytes;
  for (const auto& side : sides) {
    ms += fmt::format("{}{}_ms={:.3f}", ms.empty() ? "" : " ", side.name, 1e3 * side.seconds / reps);
    bytes += fmt::format("{}{}_lo_bytes={}", bytes.empty() ? "" : " ", side.name, side.bytes / reps);
  }
  rankwise::print0("{}", ms);
  rankwise::print0("{}", bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "train") return train(argc, argv);
  if (mode == "collectives") return collectives(argc, argv);
  std::fprintf(stderr, "usage: fsdp_bench train ... | fsdp_bench collectives ... (see bench/fsdp_bench.cpp)\n");
  return 2;
}
