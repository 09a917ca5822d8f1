#pragma once
// The run's metrics log (FabricOptions::metrics_dir): metrics.jsonl,
// metrics.csv and TensorBoard event files, rank 0 writing, opened at its
// first record with a config record. A new run replaces an earlier run's
// files there (with a note); a resumed run appends.
#include <memory>

#include "rankwise/fabric.h"
#include "rankwise/monitor/metrics_log.h"

namespace rankwise::fabric {

class RunLog {
 public:
  // Fabric::log_hyperparams()'s entries, added to the config record.
  monitor::RunConfig hyperparameters;

  // Whether the log is open (its config record written).
  bool is_open() const { return log_ != nullptr; }
  // The log, opened at the first call with `config` (the Fabric's entries,
  // log_hyperparams()'s appended); null without a metrics_dir.
  monitor::MetricsLog* open(const FabricOptions& options, monitor::RunConfig config);
  // Closes the log's files (flushed); a later open() reopens them.
  void close() { log_.reset(); }

 private:
  std::unique_ptr<monitor::MetricsLog> log_;
};

}  // namespace rankwise::fabric
