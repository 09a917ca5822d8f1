// optimizer_state_dict / load_optimizer_state_dict and the scheduler state:
// every libtorch optimizer's per-parameter state and param_group options
// come back exactly, in PyTorch's layout; bad states are named.
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <sstream>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/lr_scheduler_state.h"
#include "rankwise/checkpoint/optimizer_state.h"
#include "rankwise/checkpoint/training_state.h"
#include "rankwise/error.h"

namespace {

using torch::optim::Optimizer;

struct Net : torch::nn::Module {
  Net() {
    a = register_module("a", torch::nn::Linear(4, 3));
    b = register_module("b", torch::nn::Linear(3, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

// Two param groups (layer a, layer b) so per-group options are exercised.
std::vector<torch::optim::OptimizerParamGroup> groups(Net& net) {
  return {torch::optim::OptimizerParamGroup(net.a->parameters()),
          torch::optim::OptimizerParamGroup(net.b->parameters())};
}

struct Case {
  std::string name;
  // Builds the optimizer; `variant` 1 builds it with other hyper-parameters
  // (what a resumed process that forgot the decayed values would have).
  std::function<std::unique_ptr<Optimizer>(Net&, int variant)> make;
};
// gtest prints a parameter it cannot print as its bytes, which hold addresses:
// the test names ctest lists would then change from one build to the next.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  using namespace torch::optim;
  return {
      {"SGD", [](Net& n, int v) {
         return std::make_unique<SGD>(
             groups(n), SGDOptions(v ? 0.5 : 0.1).momentum(v ? 0.1 : 0.9).nesterov(!v).weight_decay(v ? 0 : 1e-3));
       }},
      {"Adam", [](Net& n, int v) {
         return std::make_unique<Adam>(
             groups(n), AdamOptions(v ? 0.5 : 0.01).betas({v ? 0.5 : 0.8, 0.99}).amsgrad(!v).eps(v ? 1e-3 : 1e-8));
       }},
      {"AdamW", [](Net& n, int v) {
         return std::make_unique<AdamW>(groups(n), AdamWOptions(v ? 0.5 : 0.01).weight_decay(v ? 0 : 0.05));
       }},
      {"RMSprop", [](Net& n, int v) {
         return std::make_unique<RMSprop>(
             groups(n), RMSpropOptions(v ? 0.5 : 0.01).momentum(v ? 0 : 0.5).centered(!v).alpha(v ? 0.5 : 0.9));
       }},
      {"Adagrad", [](Net& n, int v) {
         return std::make_unique<Adagrad>(
             groups(n), AdagradOptions(v ? 0.5 : 0.05).lr_decay(v ? 0 : 0.01).initial_accumulator_value(v ? 0 : 0.1));
       }},
  };
}

void train_step(Net& net, Optimizer& opt, int i) {
  opt.zero_grad();
  const auto x = torch::sin(torch::arange(32, torch::kFloat32).reshape({8, 4}) * (0.1 * (i + 1)));
  net.forward(x).pow(2).mean().backward();
  opt.step();
}

void set_lr(Optimizer& opt, std::size_t group, double lr) {
  auto& options = opt.param_groups()[group].options();
  options.set_lr(lr);
}

std::string temp_path(const std::string& name) {
  return "/tmp/rankwise_optimizer_state_" + std::to_string(::getpid()) + "_" + name + ".pt";
}

rankwise::checkpoint::Checkpoint through_file(const rankwise::checkpoint::Checkpoint& checkpoint, const std::string& name) {
  const std::string path = temp_path(name);
  rankwise::checkpoint::save(path, checkpoint);
  auto loaded = rankwise::checkpoint::load(path);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  return loaded;
}

std::vector<char> pickled(const c10::IValue& v) { return torch::pickle_save(v); }

class OptimizerState : public ::testing::TestWithParam<Case> {};

// The case the format exists for: a learning rate decayed by hand in one
// group, killed and resumed by a process that builds its optimizer with
// other hyper-parameters. The resumed run ends bitwise equal.
TEST_P(OptimizerState, ResumeRestoresStateAndEveryGroupOption) {
  const Case& c = GetParam();
  torch::manual_seed(1);
  Net net;
  auto opt = c.make(net, 0);
  for (int i = 0; i < 3; ++i) train_step(net, *opt, i);
  set_lr(*opt, 1, opt->param_groups()[1].options().get_lr() * 0.5);  // hand-written decay

  rankwise::checkpoint::TrainingState state;
  state.model = &net;
  state.optimizer = opt.get();
  state.step = 3;
  const auto saved_bytes = pickled(rankwise::checkpoint::optimizer_state_dict(*opt));
  const auto checkpoint = through_file(rankwise::checkpoint::capture(state), c.name);
  EXPECT_EQ(checkpoint.at("optimizer_type").toStringRef(), c.name);

  for (int i = 3; i < 6; ++i) train_step(net, *opt, i);

  torch::manual_seed(99);
  Net resumed;
  auto resumed_opt = c.make(resumed, 1);
  rankwise::checkpoint::TrainingState target;
  target.model = &resumed;
  target.optimizer = resumed_opt.get();
  rankwise::checkpoint::restore(checkpoint, target);
  // Everything the optimizer holds is what was saved, byte for byte.
  EXPECT_EQ(pickled(rankwise::checkpoint::optimizer_state_dict(*resumed_opt)), saved_bytes);
  for (int i = 3; i < 6; ++i) train_step(resumed, *resumed_opt, i);
  for (const auto& p : net.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), resumed.named_parameters()[p.key()])) << c.name << " " << p.key();
  }
  EXPECT_EQ(pickled(rankwise::checkpoint::optimizer_state_dict(*resumed_opt)),
            pickled(rankwise::checkpoint::optimizer_state_dict(*opt)));
}

// Identical states give identical bytes (nothing keyed by an address), in
// PyTorch's layout.
TEST_P(OptimizerState, LayoutIsPyTorchsAndDeterministic) {
  const Case& c = GetParam();
  torch::manual_seed(2);
  Net first;
  torch::manual_seed(2);
  Net second;
  auto first_opt = c.make(first, 0);
  auto second_opt = c.make(second, 0);
  for (int i = 0; i < 2; ++i) {
    train_step(first, *first_opt, i);
    train_step(second, *second_opt, i);
  }
  const auto dict = rankwise::checkpoint::optimizer_state_dict(*first_opt);
  EXPECT_EQ(pickled(dict), pickled(rankwise::checkpoint::optimizer_state_dict(*second_opt)));
  const auto top = dict.toGenericDict();
  const auto param_groups = top.at("param_groups").toListRef();
  ASSERT_EQ(param_groups.size(), 2u);
  // Indices run across groups: a has weight+bias (0, 1), b has (2, 3).
  EXPECT_EQ(param_groups[0].toGenericDict().at("params").toIntVector(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(param_groups[1].toGenericDict().at("params").toIntVector(), (std::vector<int64_t>{2, 3}));
  EXPECT_DOUBLE_EQ(param_groups[0].toGenericDict().at("lr").toDouble(),
                   first_opt->param_groups()[0].options().get_lr());
  EXPECT_FALSE(param_groups[0].toGenericDict().at("maximize").toBool());
  const auto per_param = top.at("state").toGenericDict();
  EXPECT_EQ(per_param.size(), 4u);
  const auto entry = per_param.at(int64_t{2}).toGenericDict();
  if (entry.contains("step")) {
    const auto step = entry.at("step").toTensor();
    EXPECT_EQ(step.dim(), 0);
    EXPECT_EQ(step.scalar_type(), torch::kFloat32);
    EXPECT_EQ(step.item<double>(), 2.0);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, OptimizerState, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(LrSchedulerState, StepLrResumesMidSchedule) {
  torch::manual_seed(3);
  Net net;
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.4).momentum(0.9));
  torch::optim::StepLR scheduler(opt, /*step_size=*/3, /*gamma=*/0.5);
  for (int i = 0; i < 5; ++i) {  // 5 scheduler steps: lr halved once (at count 3)
    train_step(net, opt, i);
    scheduler.step();
  }
  rankwise::checkpoint::TrainingState state;
  state.model = &net;
  state.optimizer = &opt;
  state.lr_scheduler = &scheduler;
  const auto checkpoint = through_file(rankwise::checkpoint::capture(state), "steplr");
  EXPECT_EQ(checkpoint.at("lr_scheduler").toGenericDict().at("step_count").toInt(), 5);
  for (int i = 5; i < 10; ++i) {
    train_step(net, opt, i);
    scheduler.step();
  }

  Net resumed;
  torch::optim::SGD resumed_opt(resumed.parameters(), torch::optim::SGDOptions(0.4).momentum(0.9));
  torch::optim::StepLR resumed_scheduler(resumed_opt, 3, 0.5);
  rankwise::checkpoint::TrainingState target;
  target.model = &resumed;
  target.optimizer = &resumed_opt;
  target.lr_scheduler = &resumed_scheduler;
  rankwise::checkpoint::restore(checkpoint, target);
  EXPECT_DOUBLE_EQ(resumed_opt.param_groups()[0].options().get_lr(), 0.2);
  for (int i = 5; i < 10; ++i) {
    train_step(resumed, resumed_opt, i);
    resumed_scheduler.step();
  }
  // StepLR halves when its count (before the step) is 3, 6, 9: 0.4 / 8.
  EXPECT_DOUBLE_EQ(resumed_opt.param_groups()[0].options().get_lr(), 0.05);
  EXPECT_EQ(resumed_opt.param_groups()[0].options().get_lr(), opt.param_groups()[0].options().get_lr());
  for (const auto& p : net.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), resumed.named_parameters()[p.key()])) << p.key();
  }
}

TEST(LrSchedulerState, MissingOrMalformedStateIsNamed) {
  Net net;
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::StepLR scheduler(opt, 2);
  rankwise::checkpoint::TrainingState without;
  without.optimizer = &opt;
  const auto checkpoint = rankwise::checkpoint::capture(without);
  rankwise::checkpoint::TrainingState target;
  target.optimizer = &opt;
  target.lr_scheduler = &scheduler;
  try {
    rankwise::checkpoint::restore(checkpoint, target);
    FAIL();
  } catch (const rankwise::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no learning-rate scheduler state"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rankwise::checkpoint::load_lr_scheduler_state_dict(scheduler, c10::IValue(int64_t{3})),
               rankwise::CheckpointError);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const rankwise::CheckpointError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OptimizerStateErrors, MismatchesAreNamedAndLeaveTheOptimizerUnchanged) {
  torch::manual_seed(4);
  Net net;
  torch::optim::Adam opt(groups(net), torch::optim::AdamOptions(0.01));
  train_step(net, opt, 0);
  const auto good = rankwise::checkpoint::optimizer_state_dict(opt);
  const auto before = pickled(good);

  // One group instead of two.
  Net other;
  torch::optim::Adam one_group(other.parameters(), torch::optim::AdamOptions(0.01));
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(one_group, good); })
                .find("has 2 param_groups, this Adam has 1"),
            std::string::npos);

  // A state tensor of another shape.
  auto bad_shape = good.deepcopy();
  bad_shape.toGenericDict().at("state").toGenericDict().at(int64_t{0}).toGenericDict().insert_or_assign(
      "exp_avg", torch::zeros({7}));
  const auto shape_error = error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(opt, bad_shape); });
  EXPECT_NE(shape_error.find("state[0] (param_groups[0], parameter 0): 'exp_avg' has shape [7]"),
            std::string::npos)
      << shape_error;
  EXPECT_EQ(pickled(rankwise::checkpoint::optimizer_state_dict(opt)), before);  // nothing half-loaded

  // A missing option, and an option libtorch cannot honour.
  auto no_betas = good.deepcopy();
  ASSERT_EQ(no_betas.toGenericDict().at("param_groups").toList().get(1).toGenericDict().erase("betas"), 1u);
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(opt, no_betas); })
                .find("param_groups[1] has no 'betas'"),
            std::string::npos);
  auto maximize = good.deepcopy();
  maximize.toGenericDict().at("param_groups").toList().get(0).toGenericDict().insert_or_assign("maximize", true);
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(opt, maximize); }).find("'maximize': true"),
            std::string::npos);
  EXPECT_EQ(pickled(rankwise::checkpoint::optimizer_state_dict(opt)), before);

  // A state tensor or "step" the options need is missing (Python files can lack them).
  for (const char* key : {"step", "exp_avg", "exp_avg_sq"}) {
    auto lacking = good.deepcopy();
    ASSERT_EQ(lacking.toGenericDict().at("state").toGenericDict().at(int64_t{1}).toGenericDict().erase(key), 1u);
    EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(opt, lacking); })
                  .find(std::string("state[1] (param_groups[0], parameter 1) has no '") + key + "'"),
              std::string::npos)
        << key;
  }
  auto amsgrad = good.deepcopy();
  amsgrad.toGenericDict().at("param_groups").toList().get(1).toGenericDict().insert_or_assign("amsgrad", true);
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(opt, amsgrad); })
                .find("state[2] (param_groups[1], parameter 0) has no 'max_exp_avg_sq'"),
            std::string::npos);
  // An empty per-parameter dict is a parameter not stepped yet: no state.
  auto empty = good.deepcopy();
  empty.toGenericDict().at("state").toGenericDict().insert_or_assign(
      int64_t{3}, c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  torch::optim::Adam fresh(groups(net), torch::optim::AdamOptions(0.01));
  rankwise::checkpoint::load_optimizer_state_dict(fresh, empty);
  EXPECT_EQ(fresh.state().size(), 3u);
  EXPECT_EQ(pickled(rankwise::checkpoint::optimizer_state_dict(opt)), before);

  // LBFGS is refused with the supported list.
  torch::optim::LBFGS lbfgs(net.parameters());
  EXPECT_NE(error_of([&] { rankwise::checkpoint::optimizer_state_dict(lbfgs); }).find("supported: SGD, Adam"),
            std::string::npos);

  // A training state of an Adam run restored into an SGD run.
  rankwise::checkpoint::TrainingState adam_state;
  adam_state.optimizer = &opt;
  const auto checkpoint = rankwise::checkpoint::capture(adam_state);
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.1));
  rankwise::checkpoint::TrainingState sgd_state;
  sgd_state.optimizer = &sgd;
  EXPECT_NE(error_of([&] { rankwise::checkpoint::restore(checkpoint, sgd_state); })
                .find("the checkpoint's optimizer is Adam and this run's is SGD"),
            std::string::npos);
}

// Checkpoints of rankwise's earlier format (optimizer entry = libtorch's
// archive) still load their per-parameter state.
// PyTorch 2.x writes 'decoupled_weight_decay' in every Adam (false) and AdamW
// (true) param_group: each loads into its own type and is refused by the other.
// Groups built with another optimizer's options (libtorch 1.13 keeps them and
// static_casts at each step): a CheckpointError naming the group, not a bare
// std::bad_cast, on save and on load.
TEST(OptimizerStateErrors, GroupsWithAnotherOptimizersOptionsAreNamed) {
  Net net;
  std::vector<torch::optim::OptimizerParamGroup> mixed;
  mixed.emplace_back(net.parameters());
  mixed.emplace_back(std::vector<torch::Tensor>{torch::zeros({2}, torch::requires_grad())},
                     std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.1)));
  torch::optim::Adam opt(std::move(mixed), torch::optim::AdamOptions(0.01));
  if (dynamic_cast<const torch::optim::AdamWOptions*>(&opt.param_groups()[1].options()) == nullptr) {
    // libtorch 2.x gives every group options of the optimizer's own type
    // (merged with its defaults): nothing left to refuse.
    EXPECT_TRUE(dynamic_cast<const torch::optim::AdamOptions*>(&opt.param_groups()[1].options()));
    EXPECT_NO_THROW(rankwise::checkpoint::optimizer_state_dict(opt));
    return;
  }
  const std::string want =
      "param_groups[1] of this torch::optim::Adam holds the options of another optimizer type";
  EXPECT_NE(error_of([&] { rankwise::checkpoint::optimizer_state_dict(opt); }).find(want), std::string::npos)
      << error_of([&] { rankwise::checkpoint::optimizer_state_dict(opt); });
  Net other;
  torch::optim::Adam fine(other.parameters(), torch::optim::AdamOptions(0.01));
  const auto state = rankwise::checkpoint::optimizer_state_dict(fine);
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(opt, state); }).find(want), std::string::npos);
}

TEST(OptimizerStateErrors, DecoupledWeightDecayAsPyTorch2WritesIt) {
  torch::manual_seed(4);
  Net net;
  torch::optim::Adam adam(net.parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::AdamW adamw(net.parameters(), torch::optim::AdamWOptions(0.01));
  train_step(net, adam, 0);
  train_step(net, adamw, 0);
  auto with_flag = [](const c10::IValue& state, bool decoupled) {
    auto copy = state.deepcopy();
    copy.toGenericDict().at("param_groups").toList().get(0).toGenericDict().insert_or_assign(
        "decoupled_weight_decay", decoupled);
    return copy;
  };
  const auto adam_state = with_flag(rankwise::checkpoint::optimizer_state_dict(adam), false);
  const auto adamw_state = with_flag(rankwise::checkpoint::optimizer_state_dict(adamw), true);
  EXPECT_EQ(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(adam, adam_state); }), "(no error)");
  EXPECT_EQ(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(adamw, adamw_state); }), "(no error)");
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(adam, adamw_state); })
                .find("'decoupled_weight_decay': true (AdamW's update), which this optimizer does "
                      "not do; load it into torch::optim::AdamW"),
            std::string::npos);
  EXPECT_NE(error_of([&] { rankwise::checkpoint::load_optimizer_state_dict(adamw, adam_state); })
                .find("'decoupled_weight_decay': false (Adam's update), but this optimizer is "
                      "AdamW; load it into torch::optim::Adam"),
            std::string::npos);
}

TEST(OptimizerStateErrors, OlderArchiveFormatStillLoads) {
  torch::manual_seed(5);
  Net net;
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int i = 0; i < 2; ++i) train_step(net, opt, i);
  torch::serialize::OutputArchive archive;
  opt.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  auto legacy = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(legacy.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  rankwise::checkpoint::TrainingState state;
  state.model = &net;
  auto legacy_checkpoint = rankwise::checkpoint::capture(state);
  legacy_checkpoint.insert("format", std::string("rankwise.training_state/1"));
  legacy_checkpoint.insert("optimizer", legacy);
  const auto checkpoint = through_file(legacy_checkpoint, "legacy");  // capture() aliases the model
  for (int i = 2; i < 4; ++i) train_step(net, opt, i);

  Net resumed;
  torch::optim::SGD resumed_opt(resumed.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  rankwise::checkpoint::TrainingState target;
  target.model = &resumed;
  target.optimizer = &resumed_opt;
  testing::internal::CaptureStderr();
  rankwise::checkpoint::restore(checkpoint, target);
  const std::string note = testing::internal::GetCapturedStderr();
  EXPECT_NE(note.find("older format"), std::string::npos) << note;
  for (int i = 2; i < 4; ++i) train_step(resumed, resumed_opt, i);
  for (const auto& p : net.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), resumed.named_parameters()[p.key()])) << p.key();
  }
}

}  // namespace
