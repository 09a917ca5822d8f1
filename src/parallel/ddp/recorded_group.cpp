#include "parallel/ddp/recorded_group.h"

#include <source_location>
#include <type_traits>
#include <utility>

#include "compat/shared_backends.h"
#include "rankwise/diag/flight_recorder.h"
#include "rankwise/dist/process_group.h"

namespace rankwise::parallel::ddp {
namespace {

// c10d's Work handle: ProcessGroup::Work in 1.13, c10d::Work in 2.x.
using WorkPtr = decltype(std::declval<c10d::ProcessGroup&>().barrier());

class RecordedGroup final : public c10d::ProcessGroup {
 public:
  RecordedGroup(rankwise::dist::ProcessGroup& group, std::function<std::string()> what)
      : c10d::ProcessGroup(group.rank(), group.world_size()),
        group_(&group),
        inner_(group.c10d_group()),
        what_(std::move(what)) {
    compat::share_backends<c10d::ProcessGroup>(*this, *inner_);
  }

  const std::string getBackendName() const override { return inner_->getBackendName(); }

  WorkPtr allreduce(std::vector<at::Tensor>& tensors,
                    const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override {
    auto work = inner_->allreduce(tensors, opts);
    auto call = describe("all_reduce", tensors, what_());
    call.reduce_op = opts.reduceOp == c10d::ReduceOp::SUM ? "sum" : "other";
    group_->record_launched(std::move(call), work);
    return work;
  }

  // The Reducer's broadcasts of its new bucket layout (rebuild_buckets, in
  // the first forward after the first synchronized backward): recorded, so
  // that a rank that meets them with another collective is seen deadlocked.
  WorkPtr broadcast(std::vector<at::Tensor>& tensors,
                    const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override {
    auto work = inner_->broadcast(tensors, opts);
    group_->record_launched(
        describe("broadcast", tensors, "DistributedDataParallel: the rebuilt gradient buckets"),
        work);
    return work;
  }
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override {
    return inner_->allgather(outputs, inputs, opts);
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override {
    return inner_->barrier(opts);
  }

 private:
  static diag::CollectiveRecord describe(const char* operation,
                                         const std::vector<at::Tensor>& tensors,
                                         std::string name) {
    diag::CollectiveRecord call;
    call.operation = operation;
    if (!tensors.empty()) {
      call.dtype = c10::toString(tensors[0].scalar_type());
      call.sizes = tensors[0].sizes().vec();
    }
    call.name = std::move(name);
    const auto site = dist::CallerSite::reported(std::source_location::current());
    call.file = site.file_name();
    call.line = site.line();
    return call;
  }

  rankwise::dist::ProcessGroup* group_;
  c10::intrusive_ptr<c10d::ProcessGroup> inner_;
  std::function<std::string()> what_;
};

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> make_recorded_group(dist::ProcessGroup& group,
                                                           std::function<std::string()> what) {
  return c10::make_intrusive<RecordedGroup>(group, std::move(what));
}

}  // namespace rankwise::parallel::ddp
