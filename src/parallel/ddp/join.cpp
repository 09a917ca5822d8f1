#include "parallel/ddp/join.h"

#include <fmt/format.h>

#include <algorithm>
#include <source_location>

#include "dist/c10d_text.h"
#include "util/text.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::parallel::ddp {

DdpJoin::DdpJoin(dist::ProcessGroup& group, UnevenInputs mode) : group_(&group), mode_(mode) {
  // Keys that join() sets; unique per DDP instance (every rank builds them in the same order).
  auto counter = group.store()->add(fmt::format("rankwise/ddp/instances/{}", group.rank()), 1);
  key_prefix_ = fmt::format("rankwise/ddp/{}/joined/", counter);
}

void DdpJoin::start_training_step(int64_t iterations) {
  check_inputs_count(iterations);
  inputs_count_ = torch::ones({1}, torch::kInt64);
  inputs_work_ = launch_count(
      inputs_count_,
      fmt::format("DistributedDataParallel step {}: ranks with inputs", iterations + 1));
}

// One all_reduce (sum) of `count` on c10d's group, recorded in the flight
// recorder under `what`. Training ranks and ranks in join() launch it from
// here alike, so every rank records the same sequence; like the Reducer's
// buckets it is not checked in debug mode (a rank in join() cannot know what
// the others' Reducer does).
c10::intrusive_ptr<c10d::Work> DdpJoin::launch_count(torch::Tensor count, std::string what) {
  std::vector<at::Tensor> tensors{count};
  auto work = group_->c10d_group()->allreduce(tensors);
  diag::CollectiveRecord call;
  call.operation = "all_reduce";
  call.dtype = c10::toString(count.scalar_type());
  call.sizes = count.sizes().vec();
  call.reduce_op = "sum";
  call.name = std::move(what);
  const auto site = dist::CallerSite::reported(std::source_location::current());
  call.file = site.file_name();
  call.line = site.line();
  group_->record_launched(std::move(call), work);
  return work;
}

// How many ranks had inputs at the last training step (the world size
// when none is in flight).
int64_t DdpJoin::last_inputs_count() {
  if (!inputs_work_) return group_->world_size();
  auto work = std::move(inputs_work_);
  wait_for(*work, "the all_reduce of the previous step");
  return inputs_count_.item<int64_t>();
}

void DdpJoin::check_inputs_count(int64_t iterations) {
  if (last_inputs_count() < group_->world_size() && mode_ == UnevenInputs::kError) {
    throw_uneven(joined_ranks(), iterations);
  }
}

// A rank in join(): one all_reduce of a 0, matching a training rank's
// start_training_step(); returns how many ranks still had inputs.
int64_t DdpJoin::joined_inputs_count(int64_t iterations) {
  auto count = torch::zeros({1}, torch::kInt64);
  auto work = launch_count(
      count,
      fmt::format("DistributedDataParallel join after step {}: ranks with inputs", iterations));
  wait_for(*work, "the all_reduce of the ranks that still have inputs");
  return count.item<int64_t>();
}

void DdpJoin::wait_for(c10d::Work& work, const std::string& what) {
  try {
    work.wait();
  } catch (const std::exception& e) {
    core::raise<PeerError>(
        core::at(*group_),
        "DistributedDataParallel: {} failed; a peer probably exited. Original error: {}", what,
        dist::message_of(e));
  }
}

std::vector<int> DdpJoin::joined_ranks() {
  std::vector<int> ranks;
  for (int r = 0; r < group_->world_size(); ++r) {
    if (group_->store()->check({key_prefix_ + std::to_string(r)})) ranks.push_back(r);
  }
  return ranks;
}

void DdpJoin::throw_uneven(const std::vector<int>& joined, int64_t iterations) {
  std::vector<int> ran_out, still;
  for (int r = 0; r < group_->world_size(); ++r) {
    bool is_joined = std::find(joined.begin(), joined.end(), r) != joined.end();
    (is_joined ? ran_out : still).push_back(r);
  }
  core::raise<Error>(
      core::at(*group_),
      "DistributedDataParallel: uneven inputs: rank(s) [{}] ran out of batches (called join()) "
      "while rank(s) [{}] still had batches, at this rank's iteration {}. Give every rank the same "
      "number of batches (DistributedSampler pads or drop_last), or construct "
      "DistributedDataParallel with "
      "DistributedDataParallelOptions().uneven_inputs(rankwise::parallel::UnevenInputs::kJoin)",
      util::join_strings(ran_out), util::join_strings(still), iterations);
}

void DdpJoin::join(int64_t iterations, const std::function<void()>& shadow_step) {
  last_inputs_count();  // kJoin: the last step's count may still be in flight
  group_->store()->set(key_prefix_ + std::to_string(group_->rank()), std::vector<uint8_t>{'1'});
  // Until no rank trains: kError raises (the training ranks raise in the
  // same step, after their forward); kJoin shadows their step.
  while (joined_inputs_count(iterations) > 0) {
    if (mode_ == UnevenInputs::kError) throw_uneven(joined_ranks(), iterations);
    shadow_step();
  }
}

std::optional<int> DdpJoin::most_advanced_rank(int64_t iterations) {
  // The ranks that joined early skipped optimizer steps: as PyTorch's join
  // hook does, every rank takes the model of the last rank to join (the one
  // with the most iterations; the lowest such rank on a tie).
  auto counts = group_->all_gather(torch::tensor({iterations}, torch::kInt64));
  int last = 0;
  for (int r = 1; r < group_->world_size(); ++r) {
    if (counts[r].item<int64_t>() > counts[last].item<int64_t>()) last = r;
  }
  bool uneven = false;
  for (const auto& c : counts) uneven = uneven || !c.equal(counts[0]);
  if (!uneven) return std::nullopt;
  return last;
}

}  // namespace rankwise::parallel::ddp
