// A worker for the sharded-checkpoint tests (tests/unit/checkpoint/sharded_checkpoint_test.cpp).
// Run it through rankwise-run (or with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
//
//   torch_sharded_checkpoint save DIR SET SEED    save_sharded() of SET's tensors at this world size
//   torch_sharded_checkpoint check DIR SET SEED   load_sharded() of SET's tensors, sharded at this
//                                                 world size, compared with the expected values
//
// SET "rankwise": 1-D tensors of 6 and 10 elements and 2-D ones by rows, in
// float32, float64, bfloat16, int64 and bool, one flat-sharded tensor, a
// replicated one and non-tensor values (ObjectEntry: an int, a float, a
// tuple, a string, lists). SET "python": what tests/python/dcp_interop.py saves.
// Values: tests/python/dcp_interop.py's expected() and expected_object() (the same formulas).
//   torch_sharded_checkpoint save-skewed DIR SET SEED   save, every rank's "epoch" object its own (an error)
//   torch_sharded_checkpoint check-collective DIR SET SEED   the same through load_sharded_collective()
//                                                 (node_local: ranks that do not see a file get its bytes)
// Optional 5th and 6th arguments NODE_ROOT RANKS_PER_NODE: the rank works in
// NODE_ROOT/node<rank / RANKS_PER_NODE> (created), so that a relative DIR is
// another directory on each simulated node (node-local disks on one machine).
// Prints "rank R: saved" / "rank R: checked N entries" or "rank R: error: ..." (exit 1).
#include <ATen/ATen.h>

#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "rankwise/checkpoint/sharded_checkpoint.h"
#include "rankwise/error.h"
#include "rankwise/dist/process_group.h"

namespace {

enum class Layout { kRows, kFlat, kReplicated, kObject };

struct Spec {
  std::string key;
  std::vector<int64_t> shape;
  c10::ScalarType dtype;
  Layout layout;
};

std::vector<Spec> specs(const std::string& set) {
  using c10::ScalarType;
  if (set == "rankwise") {
    return {{"f32_6", {6}, ScalarType::Float, Layout::kRows},
            {"f32_10", {10}, ScalarType::Float, Layout::kRows},
            {"f64_10", {10}, ScalarType::Double, Layout::kRows},
            {"bf16_6", {6}, ScalarType::BFloat16, Layout::kRows},
            {"i64_10", {10}, ScalarType::Long, Layout::kRows},
            {"bool_10", {10}, ScalarType::Bool, Layout::kRows},
            {"rows_10x3", {10, 3}, ScalarType::Float, Layout::kRows},
            {"rows_6x4", {6, 4}, ScalarType::Double, Layout::kRows},
            {"flat_3x5", {3, 5}, ScalarType::Float, Layout::kFlat},
            {"replicated", {2, 3}, ScalarType::Float, Layout::kReplicated},
            {"epoch", {}, ScalarType::Float, Layout::kObject},
            {"lr", {}, ScalarType::Float, Layout::kObject},
            {"betas", {}, ScalarType::Float, Layout::kObject},
            {"name", {}, ScalarType::Float, Layout::kObject},
            {"ids", {}, ScalarType::Float, Layout::kObject},
            {"flags", {}, ScalarType::Float, Layout::kObject},
            {"big", {}, ScalarType::Float, Layout::kObject}};
  }
  if (set == "python") {
    return {{"a", {10}, ScalarType::Float, Layout::kRows},
            {"b", {6, 4}, ScalarType::Long, Layout::kRows},
            {"c", {7}, ScalarType::BFloat16, Layout::kRows},
            {"rep", {3, 2}, ScalarType::Double, Layout::kReplicated},
            {"epoch", {}, ScalarType::Float, Layout::kObject},
            {"lr", {}, ScalarType::Float, Layout::kObject},
            {"name", {}, ScalarType::Float, Layout::kObject},
            {"big", {}, ScalarType::Float, Layout::kObject}};
  }
  throw std::runtime_error("unknown set " + set);
}

// The k-th key's values (k from 1) for `seed`: as expected() in tests/python/dcp_interop.py.
at::Tensor expected(const Spec& s, int64_t k, int64_t seed) {
  int64_t numel = 1;
  for (int64_t d : s.shape) numel *= d;
  const auto i = at::arange(numel, at::TensorOptions().dtype(at::kLong));
  const int64_t base = k + 100 * seed;
  at::Tensor v;
  if (s.dtype == c10::ScalarType::Bool) {
    v = ((i * 7 + base) % 3) == 0;
  } else if (s.dtype == c10::ScalarType::Long) {
    v = i * int64_t{1000000000007} + base;
  } else {
    v = (i.to(at::kDouble) * 0.5 + static_cast<double>(base)).to(s.dtype);
  }
  return v.reshape(s.shape);
}

// The value of object `key` for `seed`: as expected_object() in tests/python/dcp_interop.py.
c10::IValue expected_object(const std::string& key, int64_t seed) {
  if (key == "epoch") return c10::IValue(seed * 7 + 3);
  if (key == "lr") return c10::IValue(0.25 + static_cast<double>(seed));
  if (key == "betas") return c10::ivalue::Tuple::create({c10::IValue(0.5), c10::IValue(0.75 + static_cast<double>(seed))});
  if (key == "name") return c10::IValue("set-" + std::to_string(seed));
  if (key == "ids") return c10::IValue(std::vector<int64_t>{seed, seed + 1, seed + 2});
  if (key == "flags") return c10::IValue(c10::List<bool>({true, false, seed % 2 == 0}));
  if (key == "big") return c10::IValue(-(int64_t{1} << 40) - seed);
  throw std::runtime_error("no object " + key);
}

std::string text(const c10::IValue& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 7) {
    std::cerr << "usage: torch_sharded_checkpoint save|save-skewed|check|check-collective DIR rankwise|python SEED "
                 "[NODE_ROOT RANKS_PER_NODE]\n";
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2], set = argv[3];
  const int64_t seed = std::stoll(argv[4]);
  int rank = 0;
  try {
    auto& group = rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
    rank = group.rank();
    const int world = group.world_size();
    if (argc == 7) {
      const auto place = std::filesystem::path(argv[5]) / ("node" + std::to_string(rank / std::stoi(argv[6])));
      std::filesystem::create_directories(place);
      std::filesystem::current_path(place);
    }
    const auto list = specs(set);
    rankwise::checkpoint::ShardedState state;
    const bool saving = mode == "save" || mode == "save-skewed";
    for (std::size_t n = 0; n < list.size(); ++n) {
      const Spec& s = list[n];
      if (s.layout == Layout::kObject) {
        c10::IValue value;  // a target: load_sharded replaces it
        if (saving) value = mode == "save-skewed" && s.key == "epoch" ? c10::IValue(int64_t{rank}) : expected_object(s.key, seed);
        state.emplace(s.key, rankwise::checkpoint::ObjectEntry{value});
        continue;
      }
      const at::Tensor values = expected(s, static_cast<int64_t>(n) + 1, seed);
      const at::Tensor source = saving ? values : at::zeros_like(values);
      switch (s.layout) {
        case Layout::kRows: state.emplace(s.key, rankwise::checkpoint::shard_rows(source, rank, world)); break;
        case Layout::kFlat: state.emplace(s.key, rankwise::checkpoint::shard_flat(source, rank, world)); break;
        case Layout::kReplicated: state.emplace(s.key, source); break;
      }
    }
    if (saving) {
      rankwise::checkpoint::save_sharded(dir, state);
      std::cout << "rank " << rank << ": saved" << std::endl;
      return 0;
    }
    if (mode == "check-collective") {
      rankwise::checkpoint::load_sharded_collective(dir, state, rankwise::checkpoint::CollectiveLoadOptions().node_local(true));
    } else {
      rankwise::checkpoint::load_sharded(dir, state);
    }
    // The sharded targets are views of zeros_like(values) at this rank's rows:
    // compare each chunk with the same rows of the expected values.
    for (std::size_t n = 0; n < list.size(); ++n) {
      const Spec& s = list[n];
      const auto& entry = state.at(s.key);
      if (s.layout == Layout::kObject) {
        const auto& got = std::get<rankwise::checkpoint::ObjectEntry>(entry).value;
        if (text(got) != text(expected_object(s.key, seed))) {
          std::cout << "rank " << rank << ": error: object '" << s.key << "' is " << text(got) << ", expected "
                    << text(expected_object(s.key, seed)) << std::endl;
          return 1;
        }
        continue;
      }
      at::Tensor values = expected(s, static_cast<int64_t>(n) + 1, seed);
      if (const auto* sharded = std::get_if<rankwise::checkpoint::ShardedTensor>(&entry)) {
        if (s.layout == Layout::kFlat) values = values.reshape({-1});
        for (const auto& chunk : sharded->chunks()) {
          const at::Tensor want = values.narrow(0, chunk.offsets[0], chunk.data.size(0));
          if (!at::equal(chunk.data, want)) {
            std::cout << "rank " << rank << ": error: '" << s.key << "' rows from " << chunk.offsets[0]
                      << " differ: got " << chunk.data << " expected " << want << std::endl;
            return 1;
          }
        }
      } else if (!at::equal(std::get<at::Tensor>(entry), values)) {
        std::cout << "rank " << rank << ": error: replicated '" << s.key << "' differs" << std::endl;
        return 1;
      }
    }
    std::cout << "rank " << rank << ": checked " << list.size() << " entries" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cout << "rank " << rank << ": error: " << e.what() << std::endl;
    return 1;
  }
}
