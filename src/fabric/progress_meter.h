#pragma once
// The training loader's progress (FabricOptions::progress: a bar or lines on
// rank 0, reduced over ranks on schedule) and the throughput and MFU its
// reductions give (Fabric::throughput()).
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>

#include "rankwise/fabric.h"
#include "rankwise/monitor/progress_bar.h"

namespace rankwise::fabric {

class ProgressMeter {
 public:
  // At the Fabric's start.
  void open(const monitor::ProgressBarOptions& options) { bar_ = std::make_unique<monitor::ProgressBar>(options); }
  // FLOPs to train on one sample (0: unknown, no MFU); `peak`: one device's
  // peak FLOP/s (0: the table's or measured, at the first pass).
  void set_flops(double flops_per_sample, double peak) {
    flops_per_sample_ = flops_per_sample;
    peak_option_ = peak;
  }
  double flops_per_sample() const { return flops_per_sample_; }

  // A training pass of `total` batches, `done` of them already, starts in
  // `epoch` (1-based) of `epochs`: first the peak (collective, once, on
  // `device` in `dtype`, before the epoch's clock starts).
  void start(int64_t epoch, int64_t epochs, int64_t total, int64_t done, const c10::Device& device,
             c10::ScalarType dtype);
  // The loss backward() saw for the batch in flight.
  void set_batch_loss(const at::Tensor& loss) { batch_loss_ = loss; }
  // A training batch of `real_samples` finished (every rank); true when it
  // reduced the progress over ranks (a step record is due).
  bool update(int64_t real_samples);
  // The epoch's training ends (every rank): true when the steps since the
  // last reduction were reduced.
  bool end();

  fabric::Throughput throughput();
  const monitor::ProgressBar& bar() const { return *bar_; }

 private:
  void resolve_peak(const c10::Device& device, c10::ScalarType dtype);
  void warn_if_mfu_above_one(double mfu);

  std::unique_ptr<monitor::ProgressBar> bar_;
  bool open_epoch_ = false;  // started and not yet ended
  at::Tensor batch_loss_;    // detached, on its device
  double flops_per_sample_ = 0;
  double peak_option_ = 0;
  double peak_ = 0;  // 0: not yet resolved
  bool warned_mfu_ = false;
};

}  // namespace rankwise::fabric
