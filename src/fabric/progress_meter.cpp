#include "fabric/progress_meter.h"

#include <chrono>
#include <cmath>
#include <utility>

#include "rankwise/dist/consensus.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/log.h"
#include "rankwise/monitor/throughput.h"

namespace rankwise::fabric {

// One device's peak FLOP/s, once, at the first training pass on every rank
// (collective: every rank begins its passes alike): rank 0's value,
// measured on the CPU while every rank measures (0.1 s), so that each
// process gets its share of the cores and the epoch's clock has not started.
void ProgressMeter::resolve_peak(const c10::Device& device, c10::ScalarType dtype) {
  if (peak_ > 0 || flops_per_sample_ <= 0) return;
  if (peak_option_ > 0) {
    peak_ = peak_option_;
    return;
  }
  peak_ = monitor::peak_flops(device, dtype, std::chrono::milliseconds(100));
  if (dist::is_initialized()) peak_ = dist::broadcast_decision(peak_, 0);
}

void ProgressMeter::start(int64_t epoch, int64_t epochs, int64_t total, int64_t done, const c10::Device& device,
                          c10::ScalarType dtype) {
  if (!bar_) return;
  resolve_peak(device, dtype);  // MFU's peak, before the epoch's clock starts
  bar_->start_epoch(epoch, epochs, total, done);
  open_epoch_ = true;
}

bool ProgressMeter::update(int64_t real_samples) {
  if (!open_epoch_) return false;
  return bar_->update(real_samples, std::exchange(batch_loss_, at::Tensor()));
}

bool ProgressMeter::end() {
  if (!open_epoch_) return false;
  open_epoch_ = false;
  return bar_->end_epoch();
}

fabric::Throughput ProgressMeter::throughput() {
  fabric::Throughput t;
  if (bar_) {
    t.samples_per_s = bar_->samples_per_second();
    t.epoch_samples_per_s = bar_->epoch_samples_per_second();
  }
  if (flops_per_sample_ <= 0) return t;
  t.flops_per_sample = flops_per_sample_;
  if (std::isfinite(t.samples_per_s) && peak_ > 0) {
    const int world = dist::world_size_or_one();
    t.mfu = t.samples_per_s * flops_per_sample_ / (world * peak_);
    warn_if_mfu_above_one(*t.mfu);
  }
  return t;
}

// An MFU above 1 means a wrong FLOPs per sample or peak: say so once.
void ProgressMeter::warn_if_mfu_above_one(double mfu) {
  if (mfu <= 1 || warned_mfu_) return;
  warned_mfu_ = true;
  print0("warning: MFU is {:.3g}, above 1: the FLOPs per sample ({:.4g}) or one device's peak "
         "({:.4g} FLOP/s) is off; give --peak-flops in FLOP/s (989e12, not 989) and "
         "--flops-per-sample for one training sample, forward and backward (this warning is "
         "shown once)",
         mfu, flops_per_sample_, peak_);
}

}  // namespace rankwise::fabric
