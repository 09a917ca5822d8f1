// A process that saves checkpoints, for fault-injection tests (run it with
// RANKWISE_CHECKPOINT_FAULT set) and concurrency tests.
//
//   torch_checkpoint_writer manager DIR STEP   CheckpointManager(DIR, keep_last 2).save(step STEP)
//   torch_checkpoint_writer manager-async DIR STEP   the same with save_async(), after which the
//                                              payload is overwritten in place (training goes
//                                              on) before wait()
//   torch_checkpoint_writer plain PATH VALUE   rankwise::checkpoint::save(PATH) without a process group
//   torch_checkpoint_writer check PATH         prints "value V" when the file verifies and its
//                                              payload is uniformly V, else the error
// The payload is 1 Mi float32 (4 MiB) all equal to STEP / VALUE, so a torn or
// mixed file would show as a checksum error or a non-uniform payload.
#include <torch/torch.h>

#include <iostream>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/manager.h"

namespace {

rankwise::checkpoint::Checkpoint payload(int64_t value) {
  rankwise::checkpoint::Checkpoint c;
  c.insert("step", value);
  c.insert("payload", torch::full({1 << 20}, static_cast<float>(value)));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: torch_checkpoint_writer manager|manager-async DIR STEP | plain PATH VALUE | check PATH -\n";
    return 2;
  }
  const std::string mode = argv[1], where = argv[2];
  try {
    if (mode == "manager") {
      const int64_t step = std::stoll(argv[3]);
      rankwise::checkpoint::CheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(where).keep_last(2));
      manager.save(payload(step), step);
    } else if (mode == "manager-async") {
      const int64_t step = std::stoll(argv[3]);
      rankwise::checkpoint::CheckpointManager manager(rankwise::checkpoint::CheckpointManagerOptions(where).keep_last(2));
      auto state = payload(step);
      manager.save_async(state, step);
      state.at("payload").toTensor().fill_(-1.0f);  // the file must not see this
      manager.wait();
    } else if (mode == "plain") {
      rankwise::checkpoint::save(where, payload(std::stoll(argv[3])));
    } else if (mode == "check") {
      auto c = rankwise::checkpoint::load(where);
      auto p = c.at("payload").toTensor();
      const auto v = c.at("step").toInt();
      if (!torch::equal(p, torch::full({1 << 20}, static_cast<float>(v)))) {
        std::cout << "mixed payload\n";
        return 1;
      }
      std::cout << "value " << v << "\n";
      return 0;
    } else {
      std::cerr << "unknown mode " << mode << "\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "saved\n";
  return 0;
}
