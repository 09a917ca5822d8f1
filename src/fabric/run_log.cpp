#include "fabric/run_log.h"

#include <filesystem>
#include <string>

#include "rankwise/log.h"

namespace rankwise::fabric {
namespace {

// A new run (not a resume) in a directory with an earlier run's metrics
// replaces them, with a note (rank 0): its log, CSV and TensorBoard event
// files, so that TensorBoard does not show two runs as one.
void remove_earlier_metrics(const std::filesystem::path& dir) {
  if (!is_rank_zero()) return;
  std::error_code error;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name != "metrics.jsonl" && name != "metrics.csv" && name.rfind("events.out.tfevents.", 0) != 0) continue;
    std::error_code ignored;
    removed += std::filesystem::remove(entry.path(), ignored) ? 1 : 0;
  }
  if (removed > 0) {
    print0("note: {} held an earlier run's metrics; this new run replaces them ({} file{}: the "
           "metrics log, CSV and TensorBoard events); --resume appends instead",
           dir.string(), removed, removed == 1 ? "" : "s");
  }
}

}  // namespace

monitor::MetricsLog* RunLog::open(const FabricOptions& options, monitor::RunConfig config) {
  if (log_ || options.metrics_dir().empty()) return log_.get();
  const std::filesystem::path dir(options.metrics_dir());
  const bool resumed = options.resume() == Resume::kLatest;
  if (!resumed) remove_earlier_metrics(dir);
  config.insert(config.end(), hyperparameters.begin(), hyperparameters.end());
  log_ = std::make_unique<monitor::MetricsLog>(monitor::MetricsLogOptions((dir / "metrics.jsonl").string())
                                                   .append(resumed)
                                                   .csv_path((dir / "metrics.csv").string())
                                                   .tensorboard_dir(dir.string()),
                                               config);
  return log_.get();
}

}  // namespace rankwise::fabric
