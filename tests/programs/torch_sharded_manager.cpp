// A worker for the ShardedCheckpointManager tests (tests/unit/checkpoint/sharded_manager_test.cpp).
// Run it through rankwise-run (or with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
//
//   torch_sharded_manager save ROOT FROM TO KEEP   saves steps FROM..TO (as step*100), keep_last KEEP
//   torch_sharded_manager save-async ROOT FROM TO KEEP   the same with save_async(), after which the
//                                                  state is overwritten in place (training goes on)
//                                                  before the next call; wait() at the end
//   torch_sharded_manager load ROOT                load_latest_collective() at this world size, and
//                                                  compares with the values of the step it names
//
// RANKWISE_TEST_BLOCK_STEP=S: once save_async of step S has returned, rank 0 puts a directory
// that is not a checkpoint (holding a file "user-data") at step S's path, so that publishing it fails.
//
// RANKWISE_TEST_SAVE_TWICE=S: every rank calls save_async for step S twice in a row (an
// interval's save and an epoch end's landing on the same step).
//
// RANKWISE_TEST_DISK_FULL=R@S: rank R's files may not grow past 512 bytes (RLIMIT_FSIZE, a full
// disk) from the save of step S until the manager's next call has returned (save-async).
//
// Optional last arguments NODE_ROOT RANKS_PER_NODE: the rank works in NODE_ROOT/node<rank / RANKS_PER_NODE>
// (created), so a relative ROOT is another directory on each simulated node (node-local disks).
//
// The state of step s: "w" float32 [10] by rows, value 1000*s + i; "n" int64
// [6, 2] by rows, value s*1000000000007 + i; "b" replicated float64 [2], value s + i/4.
// Prints "rank R: saved step S", "rank R: loaded step S, values ok" or "rank R: loaded none",
// or "rank R: error: ..." (exit 1).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "rankwise/checkpoint/sharded_manager.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"
#include "rankwise/env.h"
#include "../support/file_size_limit.h"

namespace {

rankwise::checkpoint::ShardedState state_of(int64_t s, int rank, int world, bool zeros) {
  at::Tensor w = at::arange(10, at::kFloat) + 1000.0 * static_cast<double>(s);
  at::Tensor n = at::arange(12, at::kLong).reshape({6, 2}) + s * int64_t{1000000000007};
  at::Tensor b = at::arange(2, at::kDouble) / 4 + static_cast<double>(s);
  if (zeros) {
    w = at::zeros_like(w);
    n = at::zeros_like(n);
    b = at::zeros_like(b);
  }
  rankwise::checkpoint::ShardedState state;
  state.emplace("w", rankwise::checkpoint::shard_rows(w, rank, world));
  state.emplace("n", rankwise::checkpoint::shard_rows(n, rank, world));
  state.emplace("b", b);
  return state;
}

// Whether every chunk of `got` equals the same rows of `want`.
bool equal(const rankwise::checkpoint::ShardedState& got, const rankwise::checkpoint::ShardedState& want) {
  for (const auto& [key, entry] : want) {
    if (const auto* s = std::get_if<rankwise::checkpoint::ShardedTensor>(&entry)) {
      const auto& g = std::get<rankwise::checkpoint::ShardedTensor>(got.at(key));
      for (std::size_t c = 0; c < s->chunks().size(); ++c) {
        if (!at::equal(s->chunks()[c].data, g.chunks()[c].data)) return false;
      }
    } else if (!at::equal(std::get<at::Tensor>(entry), std::get<at::Tensor>(got.at(key)))) {
      return false;
    }
  }
  return true;
}

// Training goes on after save_async(): every tensor of `state` overwritten in place.
void scribble(rankwise::checkpoint::ShardedState& state) {
  for (auto& [key, entry] : state) {
    if (auto* s = std::get_if<rankwise::checkpoint::ShardedTensor>(&entry)) {
      for (const auto& chunk : s->chunks()) chunk.data.fill_(-1);
    } else if (auto* t = std::get_if<at::Tensor>(&entry)) {
      t->fill_(-1);
    }
  }
}

// RANKWISE_TEST_DISK_FULL=R@S as {R, S}, else {-1, -1}.
std::pair<int, int64_t> disk_full() {
  const auto text = rankwise::get_env("RANKWISE_TEST_DISK_FULL");
  if (!text) return {-1, -1};
  const auto at = text->find('@');
  return {std::stoi(text->substr(0, at)), std::stoll(text->substr(at + 1))};
}

// RANKWISE_TEST_SKEWED_RANK=R: rank R saves each step as the next one (a
// rank out of step with the others), else 0.
int64_t step_skew(int rank) {
  const auto text = rankwise::get_env("RANKWISE_TEST_SKEWED_RANK");
  return text && std::stoi(*text) == rank ? 1 : 0;
}

// RANKWISE_TEST_BLOCK_STEP's directory at the path of `step` in `root`.
void block(const std::string& root, int64_t step) {
  const auto path = std::filesystem::path(root) / fmt::format("checkpoint-{:010d}", step);
  std::filesystem::create_directories(path);
  std::ofstream(path / "user-data") << "not a checkpoint\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  const bool saves = mode == "save" || mode == "save-async";
  const int base = saves ? 6 : 3;
  if (!((saves || mode == "load") && (argc == base || argc == base + 2))) {
    std::cerr << "usage: torch_sharded_manager save|save-async ROOT FROM TO KEEP | load ROOT [NODE_ROOT RANKS_PER_NODE]\n";
    return 2;
  }
  int rank = 0;
  try {
    auto& group = rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
    rank = group.rank();
    const int world = group.world_size();
    if (argc == base + 2) {
      const auto place = std::filesystem::path(argv[base]) / ("node" + std::to_string(rank / std::stoi(argv[base + 1])));
      std::filesystem::create_directories(place);
      std::filesystem::current_path(place);
    }
    rankwise::checkpoint::CheckpointManagerOptions options(argv[2]);
    if (saves) options.keep_last(std::stoll(argv[5]));
    rankwise::checkpoint::ShardedCheckpointManager manager(options);
    if (mode == "save") {
      for (int64_t s = std::stoll(argv[3]); s <= std::stoll(argv[4]); ++s) {
        manager.save(state_of(s, rank, world, false), (s + step_skew(rank)) * 100);
        std::cout << "rank " << rank << ": saved step " << s << std::endl;
      }
      return 0;
    }
    if (mode == "save-async") {
      const auto [full_rank, full_at] = disk_full();
      std::optional<rankwise::test::FileSizeLimit> full;  // released before the error is printed
      for (int64_t s = std::stoll(argv[3]); s <= std::stoll(argv[4]); ++s) {
        auto state = state_of(s, rank, world, false);
        if (s == full_at) {
          manager.wait();  // every rank (collective): the previous save's thread writes no more
          if (rank == full_rank) full.emplace(512);
        }
        manager.save_async(state, (s + step_skew(rank)) * 100);
        if (rankwise::get_env("RANKWISE_TEST_SAVE_TWICE") == std::to_string(s)) manager.save_async(state, s * 100);
        if (s == full_at + 1) full.reset();  // the call above raised or published step full_at
        if (rank == 0 && rankwise::get_env("RANKWISE_TEST_BLOCK_STEP") == std::to_string(s)) block(argv[2], s * 100);
        scribble(state);
        std::cout << "rank " << rank << ": queued step " << s << std::endl;
      }
      manager.wait();
      full.reset();
      std::cout << "rank " << rank << ": saved step " << argv[4] << std::endl;
      return 0;
    }
    auto state = state_of(0, rank, world, true);
    const auto path = manager.load_latest_collective(state);
    if (!path) {
      std::cout << "rank " << rank << ": loaded none" << std::endl;
      return 0;
    }
    const int64_t step = std::stoll(path->substr(path->size() - 10)) / 100;
    if (!equal(state, state_of(step, rank, world, false))) {
      std::cout << "rank " << rank << ": error: the values loaded from " << *path << " differ from step " << step
                << std::endl;
      return 1;
    }
    std::cout << "rank " << rank << ": loaded step " << step << ", values ok" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cout << "rank " << rank << ": error: " << e.what() << std::endl;
    return 1;
  }
}
