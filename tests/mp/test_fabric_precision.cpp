// FabricOptions::precision on 2 ranks, on the CPU: bf16-mixed runs a
// training batch's forward (and an evaluation batch's) under autocast to
// bfloat16 while parameters and gradients stay float32 and backward runs
// without autocast; 16-mixed scales the loss by the GradScaler's 2^16 (the
// gradients before unscaling are 2^16 times the hand-computed 32-true ones),
// skips a step with an inf on one rank on both ranks and halves the scale,
// and checkpoints and restores the scaler's state in PyTorch's layout;
// where this libtorch cannot autocast float16 on the CPU (1.13), 16-mixed is
// a ConfigError naming bf16-mixed; bf16-true casts the model and the
// floating-point batches to bfloat16 (a ConfigError on Gloo where it has no
// bfloat16: 1.13); a bad precision is a clear error.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "rankwise/amp/grad_scaler.h"
#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/env.h"
#include "rankwise/error.h"
#include "rankwise/fabric.h"

namespace fs = std::filesystem;

namespace {

// Sample i: x = [(i % 2 + 1) / 4, (i / 2 % 2 + 1) / 4] (exact in float16),
// label i % 2.
class Quarters : public torch::data::datasets::BatchDataset<Quarters, torch::data::Example<>> {
 public:
  explicit Quarters(int64_t n) : n_(n) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto i = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
    auto x = torch::stack({i.remainder(2) + 1, i.div(2, "floor").remainder(2) + 1}, 1);
    return {x.to(torch::kFloat32) / 4, i.remainder(2)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

// y = x W^T, W = [[1/2, -1/4]] (no bias): under float16 every value of the
// forward and backward below is exact.
struct Line : torch::nn::Module {
  Line() {
    fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(2, 1).bias(false)));
    torch::NoGradGuard no_grad;
    fc->weight.copy_(torch::tensor({{0.5f, -0.25f}}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};

rankwise::FabricOptions on_cpu(const std::string& precision) {
  return rankwise::FabricOptions()
      .device("cpu")
      .print_header(false)
      .timeout(std::chrono::seconds(60))
      .precision(precision);
}

fs::path shared_dir(const std::string& name) {
  const auto port = rankwise::get_env("MASTER_PORT").value_or("solo" + std::to_string(::getpid()));
  return fs::temp_directory_path() / ("rankwise_mp_precision_" + port + "_" + name);
}

// The dtype a float32 matmul gets here: bfloat16 or float16 under autocast.
c10::ScalarType matmul_dtype() {
  return torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type();
}

// The one training batch (4 samples per rank) through the Fabric: the loss is
// the mean of y (in float32); returns W's gradient after backward(), before
// the optimizer's step (which is taken).
// `then` runs after the loop, while the model and optimizer the Fabric holds
// still exist (e.g. fabric.save()).
torch::Tensor gradient_of_one_batch(rankwise::Fabric& fabric, bool inf_on_last_rank = false,
                                    bool* stepped = nullptr, const std::function<void()>& then = {}) {
  auto line = std::make_shared<Line>();
  torch::optim::SGD optimizer(line->parameters(), 0.5);
  auto ddp = fabric.setup(line, optimizer);
  auto loader = fabric.setup_dataloader(Quarters(8), 4, /*shuffle=*/false);
  torch::Tensor grad;
  for (auto& batch : loader) {
    fabric.backward(ddp.forward(batch.data).to(torch::kFloat32).mean());
    grad = line->fc->weight.grad().clone();
    if (inf_on_last_rank && fabric.rank() == fabric.world_size() - 1) {
      line->fc->weight.grad()[0][1] = std::numeric_limits<float>::infinity();
    }
    const bool s = fabric.optimizer_step();
    if (stepped != nullptr) *stepped = s;
  }
  if (then) then();
  return grad;
}

// d mean(y) / dW over the 8 samples of both ranks: the mean of x, by hand
// ([3/8, 3/8]: each coordinate is 1/4 and 1/2 equally often).
const torch::Tensor kHandGradient = torch::tensor({{0.375f, 0.375f}});

// The ConfigError's message of building a Fabric with `options`, or "(accepted)".
std::string config_error(const std::function<void()>& build) {
  try {
    build();
  } catch (const rankwise::ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}
std::string config_error(const rankwise::FabricOptions& options) {
  return config_error([&] { rankwise::Fabric fabric(options); });
}

// What libtorch 1.13 refuses and 2.x (2.15) does, found by trying both.
bool sixteen_mixed_runs_on_cpu() { return TORCH_VERSION_MAJOR >= 2; }
bool gloo_communicates_bfloat16() { return TORCH_VERSION_MAJOR >= 2; }

}  // namespace

TEST(FabricPrecision, Bf16MixedForwardIsBfloat16WhileParametersAndGradientsStayFloat32) {
  rankwise::Fabric fabric(on_cpu("bf16-mixed"));
  auto line = std::make_shared<Line>();
  torch::optim::SGD optimizer(line->parameters(), 0.1);
  auto ddp = fabric.setup(line, optimizer);
  auto loader = fabric.setup_dataloader(Quarters(8), 2);
  auto eval = fabric.setup_eval_dataloader(Quarters(8), 2);
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.scalar_type(), torch::kFloat32);
    auto y = ddp.forward(batch.data);
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    c10::ScalarType in_backward = torch::kFloat32;
    y.register_hook([&](torch::Tensor g) {
      in_backward = matmul_dtype();  // backward runs without autocast
      return g;
    });
    auto loss = torch::nn::functional::cross_entropy(torch::cat({y, -y}, 1), batch.target);
    EXPECT_EQ(loss.scalar_type(), torch::kFloat32);  // autocast's float32 list
    fabric.backward(loss);
    EXPECT_EQ(in_backward, torch::kFloat32);
    EXPECT_EQ(matmul_dtype(), torch::kBFloat16);  // and comes back after it
    for (const auto& p : line->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat32);
      EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);
    }
    fabric.optimizer_step();
  }
  EXPECT_EQ(matmul_dtype(), torch::kFloat32);  // not after the loop
  for (auto& batch : eval) {  // evaluation batches autocast too, as Lightning's forward
    torch::NoGradGuard no_grad;
    EXPECT_EQ(ddp.forward(batch.data).scalar_type(), torch::kBFloat16);
    break;
  }
  EXPECT_EQ(matmul_dtype(), torch::kFloat32);  // not after a break
}

TEST(FabricPrecision, Bf16TrueOnGlooWhereItCannotCommunicateBfloat16IsAConfigError) {
  if (gloo_communicates_bfloat16()) {
    EXPECT_NO_THROW(rankwise::Fabric fabric(on_cpu("bf16-true")));
    return;
  }
  const std::string what = config_error(on_cpu("bf16-true"));
  EXPECT_NE(what.find("Gloo backend cannot broadcast or all_reduce bfloat16"), std::string::npos)
      << what;
  EXPECT_NE(what.find("use bf16-mixed"), std::string::npos) << what;
}

TEST(FabricPrecision, Bf16TrueCastsTheModelAndFloatingPointBatches) {
  if (!gloo_communicates_bfloat16()) GTEST_SKIP() << "libtorch 1.13's Gloo has no bfloat16";
  rankwise::Fabric fabric(on_cpu("bf16-true"));
  auto line = std::make_shared<Line>();
  torch::optim::SGD optimizer(line->parameters(), 0.5);
  auto ddp = fabric.setup(line, optimizer);
  EXPECT_EQ(line->fc->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(optimizer.param_groups()[0].params()[0].scalar_type(), torch::kBFloat16);
  auto loader = fabric.setup_dataloader(Quarters(8), 4, /*shuffle=*/false);
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(batch.target.scalar_type(), torch::kInt64);  // not floating point: unchanged
    EXPECT_EQ(matmul_dtype(), torch::kFloat32);            // no autocast
    fabric.backward(ddp.forward(batch.data).mean());
    EXPECT_EQ(line->fc->weight.grad().scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(line->fc->weight.grad(), kHandGradient.to(torch::kBFloat16)));
    fabric.optimizer_step();
  }
  // W - 0.5 * [3/8, 3/8], exact in bfloat16.
  EXPECT_TRUE(torch::equal(line->fc->weight, torch::tensor({{0.3125f, -0.4375f}}).to(torch::kBFloat16)));
}

TEST(FabricPrecision, SixteenMixedWhereThisLibtorchCannotIsAConfigErrorNamingBf16Mixed) {
  if (sixteen_mixed_runs_on_cpu()) {
    EXPECT_NO_THROW(rankwise::Fabric fabric(on_cpu("16-mixed")));
    return;
  }
  const std::string what = config_error(on_cpu("16-mixed"));
  EXPECT_NE(what.find("cannot autocast to float16 on cpu; use bf16-mixed"), std::string::npos) << what;
}

TEST(FabricPrecision, SixteenMixedScalesTheLossByTheGradScalersScale) {
  if (!sixteen_mixed_runs_on_cpu()) GTEST_SKIP() << "libtorch 1.13 cannot autocast float16 on the CPU";
  torch::Tensor plain, scaled;
  {
    rankwise::Fabric fabric(on_cpu("32-true"));
    plain = gradient_of_one_batch(fabric);
    EXPECT_EQ(fabric.grad_scaler(), nullptr);
  }
  {
    rankwise::Fabric fabric(on_cpu("16-mixed"));
    scaled = gradient_of_one_batch(fabric);
    ASSERT_NE(fabric.grad_scaler(), nullptr);
    EXPECT_EQ(fabric.grad_scaler()->get_scale(), 65536.0);  // a clean step: no backoff
  }
  EXPECT_TRUE(torch::equal(plain, kHandGradient)) << plain;
  EXPECT_EQ(scaled.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(scaled, kHandGradient * 65536)) << scaled;
}

TEST(FabricPrecision, SixteenMixedSkipsAStepWithAnInfOnOneRankOnBothAndBacksOff) {
  if (!sixteen_mixed_runs_on_cpu()) GTEST_SKIP() << "libtorch 1.13 cannot autocast float16 on the CPU";
  const auto dir = shared_dir("inf");
  rankwise::Fabric fabric(on_cpu("16-mixed").checkpoint_dir(dir.string()).resume(rankwise::Resume::kOverwrite));
  auto line = std::make_shared<Line>();
  torch::optim::SGD optimizer(line->parameters(), 0.5);
  auto ddp = fabric.setup(line, optimizer);
  auto loader = fabric.setup_dataloader(Quarters(8), 4, /*shuffle=*/false);
  std::string path;
  for (auto& batch : loader) {
    fabric.backward(ddp.forward(batch.data).to(torch::kFloat32).mean());
    if (fabric.rank() == fabric.world_size() - 1) {
      line->fc->weight.grad()[0][1] = std::numeric_limits<float>::infinity();
    }
    EXPECT_FALSE(fabric.optimizer_step());  // on every rank
    path = fabric.save();
  }
  EXPECT_TRUE(torch::equal(line->fc->weight, torch::tensor({{0.5f, -0.25f}})));  // not stepped
  EXPECT_EQ(fabric.grad_scaler()->get_scale(), 32768.0);  // backoff_factor 0.5
  // The checkpoint holds the scaler's state in PyTorch's GradScaler.state_dict() layout.
  const auto extras = rankwise::checkpoint::load(path).at("extras").toGenericDict();
  const auto state = extras.at("fabric.grad_scaler").toGenericDict();
  EXPECT_EQ(state.at("scale").toDouble(), 32768.0);
  EXPECT_EQ(state.at("growth_factor").toDouble(), 2.0);
  EXPECT_EQ(state.at("backoff_factor").toDouble(), 0.5);
  EXPECT_EQ(state.at("growth_interval").toInt(), 2000);
  EXPECT_EQ(state.at("_growth_tracker").toInt(), 0);
  EXPECT_EQ(extras.at("fabric.precision").toStringRef(), "16-mixed");
}

TEST(FabricPrecision, SixteenMixedRestoresTheScalersStateOnResume) {
  if (!sixteen_mixed_runs_on_cpu()) GTEST_SKIP() << "libtorch 1.13 cannot autocast float16 on the CPU";
  const auto dir = shared_dir("resume");
  {
    rankwise::Fabric fabric(on_cpu("16-mixed").checkpoint_dir(dir.string()).resume(rankwise::Resume::kOverwrite));
    bool stepped = true;
    // Saved inside: the model and optimizer are gone once it returns.
    gradient_of_one_batch(fabric, /*inf_on_last_rank=*/true, &stepped, [&] { fabric.save(); });
    EXPECT_FALSE(stepped);
  }
  rankwise::Fabric fabric(on_cpu("16-mixed").checkpoint_dir(dir.string()).resume(rankwise::Resume::kLatest));
  auto line = std::make_shared<Line>();
  torch::optim::SGD optimizer(line->parameters(), 0.5);
  auto ddp = fabric.setup(line, optimizer);
  auto loader = fabric.setup_dataloader(Quarters(8), 4, /*shuffle=*/false);
  EXPECT_EQ(fabric.grad_scaler()->get_scale(), 65536.0);  // before the resume
  for (int64_t epoch : fabric.epochs(2)) {  // restores the checkpoint: epoch 1
    (void)epoch;
    EXPECT_EQ(fabric.grad_scaler()->get_scale(), 32768.0);
    for (auto& batch : loader) {
      fabric.backward(ddp.forward(batch.data).to(torch::kFloat32).mean());
      // The restored scale: half the gradient of a fresh 16-mixed run.
      EXPECT_TRUE(torch::equal(line->fc->weight.grad(), kHandGradient * 32768));
      EXPECT_TRUE(fabric.optimizer_step());
    }
  }
}

TEST(FabricPrecision, ABadPrecisionIsAClearError) {
  const std::string choices = "is not a precision; use 32-true, bf16-mixed, 16-mixed or bf16-true";
  const std::string option = config_error(on_cpu("fp16"));
  EXPECT_NE(option.find("'fp16' " + choices), std::string::npos) << option;
  std::vector<std::string> args{"prog", "--precision", "bf16"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  const std::string flag = config_error([&] { rankwise::Fabric fabric(argc, argv.data(), on_cpu("32-true")); });
  EXPECT_NE(flag.find("--precision"), std::string::npos) << flag;
  EXPECT_NE(flag.find("'bf16' " + choices), std::string::npos) << flag;
}
