// rankwise::amp::GradScaler against Python's torch.amp.GradScaler("cpu"): the
// sequence of tests/python/grad_scaler_reference.py (inf and nan injected
// into gradients, unscale_() before step(), update(new_scale)) gives the
// same skipped steps, scales, final parameters and state_dict as the golden
// that script printed under torch 2.15
// (tests/python/golden/grad_scaler_reference.json; how it was made: the
// script's docstring). Where the reference Python's torch has a CPU
// GradScaler, the script also runs live and must print the golden, so a
// stale golden fails. The sequence runs through ATen's kernels where this
// libtorch has them for the CPU (2.x) and through the fallback in every leg.
#include "rankwise/amp/grad_scaler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/kernels/scale_kernels.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/error.h"
#include "support/shell.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using rankwise::amp::GradScaler;
using rankwise::amp::GradScalerOptions;
using rankwise::test::ReferencePython;

namespace {

const std::string kScript = std::string(RANKWISE_SOURCE_DIR) + "/tests/python/grad_scaler_reference.py";
const std::string kGolden =
    std::string(RANKWISE_SOURCE_DIR) + "/tests/python/golden/grad_scaler_reference.json";

json golden() {
  std::ifstream in(kGolden);
  return json::parse(in);
}

GradScalerOptions options_of(const json& g) {
  const auto& o = g.at("options");
  return GradScalerOptions()
      .init_scale(o.at("init_scale").get<double>())
      .growth_factor(o.at("growth_factor").get<double>())
      .backoff_factor(o.at("backoff_factor").get<double>())
      .growth_interval(o.at("growth_interval").get<int64_t>());
}

torch::Tensor tensor_of(const json& values) {
  if (values.at(0).is_array()) {
    std::vector<torch::Tensor> rows;
    for (const auto& row : values) rows.push_back(tensor_of(row));
    return torch::stack(rows);
  }
  return torch::tensor(values.get<std::vector<double>>(), torch::kDouble).to(torch::kFloat);
}

// The script's model: w [2, 2], b [2], SGD with momentum.
struct Model {
  explicit Model(const json& g)
      : w(tensor_of(g.at("init").at("w")).requires_grad_()),
        b(tensor_of(g.at("init").at("b")).requires_grad_()),
        optimizer({w, b}, torch::optim::SGDOptions(g.at("lr").get<double>())
                              .momentum(g.at("momentum").get<double>())) {}
  torch::Tensor& param(const std::string& name) { return name == "w" ? w : b; }
  torch::Tensor w, b;
  torch::optim::SGD optimizer;
};

struct Outcome {
  bool skipped;
  double scale;
};

// Steps [from, to) of the golden plan, as the script runs them.
std::vector<Outcome> run(const json& g, Model& m, GradScaler& scaler, std::size_t from, std::size_t to) {
  std::vector<Outcome> out;
  for (std::size_t step = from; step < to; ++step) {
    const auto& plan = g.at("steps").at(step).at("plan");
    m.optimizer.zero_grad();
    const auto s = static_cast<double>(step);
    const auto x = (torch::arange(8, torch::kFloat).reshape({4, 2}) + s) / 8 - 0.5;
    const auto y = (torch::arange(8, torch::kFloat).reshape({4, 2}) - s) / 16;
    const auto loss = (torch::matmul(x, m.w.t()) + m.b - y).pow(2).mean();
    scaler.scale(loss).backward();
    if (plan.contains("inject")) {
      const auto& inject = plan.at("inject");
      const auto text = inject.at(2).get<std::string>();
      const double value = text == "nan" ? std::numeric_limits<double>::quiet_NaN()
                           : text == "-inf" ? -std::numeric_limits<double>::infinity()
                                            : std::numeric_limits<double>::infinity();
      torch::NoGradGuard no_grad;
      m.param(inject.at(0).get<std::string>()).grad().view({-1})[inject.at(1).get<int64_t>()] = value;
    }
    if (plan.value("unscale_first", false)) scaler.unscale_(m.optimizer);
    const bool stepped = scaler.step(m.optimizer);
    if (plan.contains("new_scale")) {
      scaler.update(plan.at("new_scale").get<double>());
    } else {
      scaler.update();
    }
    out.push_back({!stepped, scaler.get_scale()});
  }
  return out;
}

void expect_state_dict(const c10::impl::GenericDict& state, const json& expected) {
  std::vector<std::string> keys;
  for (const auto& entry : state) keys.push_back(entry.key().toStringRef());
  EXPECT_EQ(keys, (std::vector<std::string>{"scale", "growth_factor", "backoff_factor",
                                            "growth_interval", "_growth_tracker"}));
  for (const auto& entry : state) {
    const auto key = entry.key().toStringRef();
    const auto& value = entry.value();
    const auto type = expected.at("state_dict_types").at(key).get<std::string>();
    if (type == "float") {
      ASSERT_TRUE(value.isDouble()) << key;
      EXPECT_EQ(value.toDouble(), expected.at("state_dict").at(key).get<double>()) << key;
    } else {
      ASSERT_EQ(type, "int") << key;
      ASSERT_TRUE(value.isInt()) << key;
      EXPECT_EQ(value.toInt(), expected.at("state_dict").at(key).get<int64_t>()) << key;
    }
  }
}

// Every step's outcome, the final parameters and the state_dict equal the golden's.
void expect_golden(const json& g, Model& m, const GradScaler& scaler, const std::vector<Outcome>& outcomes) {
  const auto& steps = g.at("steps");
  ASSERT_EQ(outcomes.size(), steps.size());
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].skipped, steps[i].at("skipped").get<bool>()) << "step " << i;
    EXPECT_EQ(outcomes[i].scale, steps[i].at("scale").get<double>()) << "step " << i;
  }
  for (const char* name : {"w", "b"}) {
    const auto expected = tensor_of(g.at("final_params").at(name));
    EXPECT_TRUE(torch::allclose(m.param(name).detach(), expected, 0.0, 1e-6))
        << name << ":\n" << m.param(name) << "\nexpected\n" << expected;
  }
  expect_state_dict(scaler.state_dict(), g);
}

}  // namespace

namespace {
void expect_whole_sequence_matches() {
  const auto g = golden();
  Model m(g);
  GradScaler scaler(options_of(g));
  const auto outcomes = run(g, m, scaler, 0, g.at("steps").size());
  expect_golden(g, m, scaler, outcomes);
}
}  // namespace

// Through ATen's CPU kernels where this libtorch has them, else the fallback.
TEST(GradScaler, SequenceMatchesPyTorch) { expect_whole_sequence_matches(); }

TEST(GradScaler, SequenceMatchesPyTorchThroughTheFallback) {
  rankwise::amp::kernels::ForceFallback fallback;
  expect_whole_sequence_matches();
}

TEST(GradScaler, StateDictRoundTripContinuesTheSequence) {
  const auto g = golden();
  const std::size_t n = g.at("steps").size();
  for (std::size_t split : {std::size_t{4}, std::size_t{7}, std::size_t{11}}) {
    Model m(g);
    GradScaler first(options_of(g));
    auto outcomes = run(g, m, first, 0, split);
    // Through a checkpoint file, as a training loop would keep it.
    const auto path = (fs::temp_directory_path() /
                       ("rankwise_grad_scaler_" + std::to_string(::getpid()) + ".pt")).string();
    rankwise::checkpoint::Checkpoint checkpoint;
    checkpoint.insert("scaler", first.state_dict());
    rankwise::checkpoint::save(path, checkpoint);
    GradScaler second;  // other options: all of them come from the state
    second.load_state_dict(rankwise::checkpoint::load(path).at("scaler"));
    fs::remove(path);
    const auto rest = run(g, m, second, split, n);
    outcomes.insert(outcomes.end(), rest.begin(), rest.end());
    SCOPED_TRACE("split at step " + std::to_string(split));
    expect_golden(g, m, second, outcomes);
  }
}

TEST(GradScaler, StateDictHasPythonsDefaultsAndLayout) {
  GradScaler scaler;
  const auto state = scaler.state_dict();
  ASSERT_EQ(state.size(), 5u);
  EXPECT_EQ(state.at(std::string("scale")).toDouble(), 65536.0);
  EXPECT_EQ(state.at(std::string("growth_factor")).toDouble(), 2.0);
  EXPECT_EQ(state.at(std::string("backoff_factor")).toDouble(), 0.5);
  EXPECT_EQ(state.at(std::string("growth_interval")).toInt(), 2000);
  EXPECT_EQ(state.at(std::string("_growth_tracker")).toInt(), 0);
  EXPECT_TRUE(GradScaler(GradScalerOptions().enabled(false)).state_dict().empty());
}

// Python's torch.load reads the state C++ saved (with Python's types), and
// a state Python saved loads here. Any torch (Debian's 1.13 too).
TEST(GradScaler, StateDictCrossesToPythonAndBack) {
  if (!rankwise::test::have_python_torch()) {
    GTEST_SKIP() << "the reference Python (" << RANKWISE_PYTHON << ") cannot import torch";
  }
  const auto dir = fs::temp_directory_path() / ("rankwise_grad_scaler_py_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  GradScaler scaler(GradScalerOptions().init_scale(1024.0).growth_interval(7));
  rankwise::checkpoint::Checkpoint checkpoint;
  checkpoint.insert("scaler", scaler.state_dict());
  rankwise::checkpoint::save((dir / "cpp.pt").string(), checkpoint);
  const std::string out = rankwise::test::shell(
      rankwise::test::python() + "-c 'import sys, torch\n"
      "s = torch.load(sys.argv[1])[\"scaler\"]\n"
      "print(\" \".join(f\"{k}={v!r}:{type(v).__name__}\" for k, v in s.items()))\n"
      "torch.save({\"scaler\": {\"scale\": 8.0, \"growth_factor\": 4.0, \"backoff_factor\": 0.25,"
      " \"growth_interval\": 5, \"_growth_tracker\": 3}}, sys.argv[2])' " +
      (dir / "cpp.pt").string() + " " + (dir / "py.pt").string() + " 2>&1");
  EXPECT_EQ(out,
            "scale=1024.0:float growth_factor=2.0:float backoff_factor=0.5:float "
            "growth_interval=7:int _growth_tracker=0:int\n");
  GradScaler loaded;
  loaded.load_state_dict(rankwise::checkpoint::load((dir / "py.pt").string()).at("scaler"));
  EXPECT_EQ(loaded.get_scale(), 8.0);
  EXPECT_EQ(loaded.get_growth_tracker(), 3);
  EXPECT_EQ(loaded.options().growth_factor(), 4.0);
  EXPECT_EQ(loaded.options().backoff_factor(), 0.25);
  EXPECT_EQ(loaded.options().growth_interval(), 5);
  fs::remove_all(dir);
}

TEST(GradScaler, CallsOutOfOrderAreErrors) {
  auto w = torch::ones({2}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, 0.1);
  GradScaler scaler;
  EXPECT_THROW(scaler.unscale_(optimizer), rankwise::Error);  // before any scale()
  EXPECT_THROW(scaler.update(), rankwise::Error);
  scaler.scale(w.sum()).backward();
  scaler.unscale_(optimizer);
  try {
    scaler.unscale_(optimizer);
    FAIL() << "unscale_ twice did not throw";
  } catch (const rankwise::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GradScaler::unscale_: already called for this optimizer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(scaler.step(optimizer));
  EXPECT_THROW(scaler.unscale_(optimizer), rankwise::Error);  // after step()
  EXPECT_THROW(scaler.step(optimizer), rankwise::Error);      // step() twice
  scaler.update();
  // A new iteration starts clean.
  optimizer.zero_grad();
  scaler.scale(w.sum()).backward();
  scaler.unscale_(optimizer);
  EXPECT_TRUE(scaler.step(optimizer));
}

TEST(GradScaler, StepWithoutGradientsAndUpdateWithoutStepAreErrors) {
  auto w = torch::ones({2}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, 0.1);
  GradScaler scaler;
  scaler.scale(w.sum());  // no backward()
  EXPECT_THROW(scaler.update(), rankwise::Error);
  EXPECT_THROW(scaler.step(optimizer), rankwise::Error);
}

TEST(GradScaler, Float16GradientsAreAnError) {
  auto w = torch::ones({2}, torch::TensorOptions().dtype(torch::kHalf).requires_grad(true));
  torch::optim::SGD optimizer({w}, 0.1);
  GradScaler scaler;
  scaler.scale(torch::ones({}));
  w.mutable_grad() = torch::ones({2}, torch::kHalf);
  EXPECT_THROW(scaler.unscale_(optimizer), rankwise::Error);
}

TEST(GradScaler, BadOptionsAndStatesAreRejected) {
  EXPECT_THROW(GradScaler(GradScalerOptions().growth_factor(1.0)), rankwise::ConfigError);
  EXPECT_THROW(GradScaler(GradScalerOptions().backoff_factor(1.0)), rankwise::ConfigError);
  GradScaler scaler;
  c10::impl::GenericDict empty(c10::StringType::get(), c10::AnyType::get());
  EXPECT_THROW(scaler.load_state_dict(empty), rankwise::CheckpointError);
  auto state = GradScaler().state_dict();
  state.insert_or_assign(std::string("growth_interval"), 3.5);
  EXPECT_THROW(scaler.load_state_dict(state), rankwise::CheckpointError);
  EXPECT_EQ(state.erase(std::string("growth_interval")), 1u);
  EXPECT_THROW(scaler.load_state_dict(state), rankwise::CheckpointError);
  EXPECT_THROW(scaler.load_state_dict(c10::IValue(1.0)), rankwise::CheckpointError);
}

TEST(GradScaler, DisabledPassesThrough) {
  auto w = torch::ones({2}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, 0.5);
  GradScaler scaler(GradScalerOptions().enabled(false));
  const auto loss = w.sum();
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  w.mutable_grad()[0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(scaler.step(optimizer));  // no check: it steps
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(w[1].item<float>(), 0.5f);
}

// The golden is what PyTorch prints today (with each reference Python whose
// torch has a CPU GradScaler: 2.x; Debian's 1.13 has none and skips).
class GradScalerGolden : public ::testing::TestWithParam<ReferencePython> {};

TEST_P(GradScalerGolden, IsWhatPyTorchPrints) {
  const std::string interpreter = GetParam().interpreter;
  if (!rankwise::test::have_python_torch(interpreter)) {
    GTEST_SKIP() << "the reference Python (" << interpreter << ") cannot import torch";
  }
  const std::string out = rankwise::test::shell(rankwise::test::python(interpreter) + kScript);
  const auto live = json::parse(out, nullptr, false);
  ASSERT_FALSE(live.is_discarded()) << out;
  if (live.contains("skip")) GTEST_SKIP() << live.at("skip").get<std::string>();
  const auto g = golden();
  for (const auto& [key, value] : g.items()) {
    if (key.starts_with("_")) continue;
    ASSERT_TRUE(live.contains(key)) << key;
    if (key == "final_params") {
      for (const char* name : {"w", "b"}) {
        EXPECT_TRUE(torch::allclose(tensor_of(live.at(key).at(name)), tensor_of(value.at(name)), 0.0, 1e-6))
            << name << ": " << live.at(key).dump() << " vs the golden's " << value.dump();
      }
    } else {
      EXPECT_EQ(live.at(key), value) << key << ": regenerate " << kGolden << " (see " << kScript << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WithTorch, GradScalerGolden, ::testing::ValuesIn(rankwise::test::kReferencePythons),
                         [](const auto& info) { return rankwise::test::reference_python_name(info.param); });
