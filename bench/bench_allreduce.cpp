// Latency of one Gloo all_reduce through rankwise (float32, sum), the
// microbenchmark behind BENCHMARKS.md's scheduling section. Prints on rank 0:
//   allreduce bytes=<B> calls=<N> mean_us=<m> p50_us=<p> p90_us=<q> over_3ms=<fraction>
// Usage: bench_allreduce BYTES CALLS [GLOO_THREADS]; run through rankwise-run
// (--cpu-sched to compare policies; GLOO_THREADS: InitOptions::gloo_threads).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "rankwise/rankwise.h"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: bench_allreduce BYTES CALLS [GLOO_THREADS]\n");
    return 2;
  }
  const int64_t bytes = std::stoll(argv[1]);
  const int64_t calls = std::stoll(argv[2]);
  torch::set_num_threads(1);
  rankwise::dist::InitOptions options;
  if (argc == 4) options.gloo_threads(std::stoi(argv[3]));
  rankwise::dist::init(options);
  auto tensor = torch::ones({std::max<int64_t>(1, bytes / 4)}, torch::kFloat32);
  for (int i = 0; i < 20; ++i) rankwise::dist::all_reduce(tensor);
  rankwise::dist::barrier();
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(calls));
  for (int64_t i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    rankwise::dist::all_reduce(tensor);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  double sum = 0;
  int64_t slow = 0;
  for (double u : us) {
    sum += u;
    slow += u > 3000;
  }
  std::sort(us.begin(), us.end());
  rankwise::print0("allreduce bytes={} calls={} mean_us={:.0f} p50_us={:.0f} p90_us={:.0f} over_3ms={:.2f}",
                   bytes, calls, sum / calls, us[us.size() / 2], us[us.size() * 9 / 10],
                   static_cast<double>(slow) / calls);
  return 0;
}
