// A model that shows it: a small GPT-style transformer trained byte by byte
// on the fortune cookies of the Debian package `fortunes`, under the Fabric,
// with one training loop for every strategy (--strategy ddp, zero1, fsdp).
//
//   apt-get install fortunes
//   rankwise-run --nproc-per-node 2 build/examples/gpt_fortunes --strategy fsdp [--max-steps 200]
//   [--resume]
//
// The text is every fortune file of /usr/share/games/fortunes (sorted by
// name, so every rank reads the same bytes); its last 5% is held out for
// validation. Sample i is the window [i*context, i*context + context + 1):
// the first `context` bytes are the input, the next byte of each the target.
// The model: byte and learned position embeddings, --layers pre-LayerNorm
// blocks (causal multi-head self-attention in plain libtorch ops, an MLP
// d -> 4d -> d), a final LayerNorm and a head to the 256 bytes (tied to the
// byte embedding with --tied). Its blocks sit in a ModuleList, so under fsdp
// each block is a unit of FullyShardedDataParallel with no change to the model.
//
// The Fabric shows progress, writes the metrics log and saves the training
// state at each epoch end (and every --checkpoint-every steps); --resume
// continues. Each epoch rank 0 prints the train loss and the validation loss
// (sums and counts reduced over ranks, then divided once). At the end every
// rank prints its peak resident memory (VmHWM) and the parameters it holds,
// and rank 0 a 200-byte greedy sample from the prompt "The " (all ranks run
// the forward passes: under fsdp each one gathers the shards collectively).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "rankwise/fabric/cli.h"
#include "rankwise/metrics/aggregation.h"
#include "rankwise/metrics/collection.h"
#include "rankwise/run_main.h"

namespace {

constexpr int64_t kVocab = 256;  // bytes
constexpr const char* kFortuneDir = "/usr/share/games/fortunes";

struct GptConfig {
  int64_t layers = 4, d_model = 128, heads = 4, context = 64;
  bool tied = false;
};

// Normal(0, 0.02) weights and zero biases, as GPT-2 initializes them.
void init_gpt2(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    if (item.key().ends_with("bias"))
      item.value().zero_();
    else if (item.value().dim() >= 2)
      item.value().normal_(0.0, 0.02);
  }
}

// Pre-LayerNorm block: x + attention(ln1(x)), then x + mlp(ln2(x)).
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c)
      : heads(c.heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
        qkv(register_module("qkv", torch::nn::Linear(c.d_model, 3 * c.d_model))),
        out(register_module("out", torch::nn::Linear(c.d_model, c.d_model))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
        fc1(register_module("fc1", torch::nn::Linear(c.d_model, 4 * c.d_model))),
        fc2(register_module("fc2", torch::nn::Linear(4 * c.d_model, c.d_model))) {}

  torch::Tensor forward(torch::Tensor x) {
    const int64_t batch = x.size(0), time = x.size(1), d = x.size(2), head_dim = d / heads;
    // [B, T, 3d] -> q, k, v of [B, heads, T, head_dim]
    auto qkv_heads = qkv(ln1(x)).view({batch, time, 3, heads, head_dim}).permute({2, 0, 3, 1, 4});
    auto q = qkv_heads[0], k = qkv_heads[1], v = qkv_heads[2];
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    auto future =
        torch::ones({time, time}, torch::TensorOptions().dtype(torch::kBool).device(x.device()))
            .triu(1);
    auto weights =
        torch::softmax(scores.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    auto attended = torch::matmul(weights, v).transpose(1, 2).reshape({batch, time, d});
    x = x + out(attended);
    return x + fc2(torch::gelu(fc1(ln2(x))));
  }

  int64_t heads;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, out;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c)
      : tokens(register_module("tokens", torch::nn::Embedding(kVocab, c.d_model))),
        positions(register_module("positions", torch::nn::Embedding(c.context, c.d_model))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        ln_f(register_module("ln_f",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))) {
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c));
    if (!c.tied) head = register_module("head", torch::nn::Linear(c.d_model, kVocab));
    init_gpt2(*this);
  }

  // Bytes [B, T] (int64, T <= context) -> logits [B, T, 256].
  torch::Tensor forward(torch::Tensor bytes) {
    auto where = torch::arange(bytes.size(1),
                               torch::TensorOptions().dtype(torch::kLong).device(bytes.device()));
    auto x = tokens(bytes) + positions(where);
    for (const auto& block : *blocks) x = block->as<BlockImpl>()->forward(x);
    x = ln_f(x);
    return head ? head(x) : torch::linear(x, tokens->weight);  // --tied: the byte embedding
  }

  torch::nn::Embedding tokens, positions;
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Gpt);

// Every fortune file of `dir` (regular files, not the .dat indexes, not the
// .u8 symlinks), concatenated in the order of their names: a uint8 tensor.
torch::Tensor read_fortunes(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto ext = entry.path().extension();
    if (entry.is_symlink() || !entry.is_regular_file() || ext == ".dat" || ext == ".u8") continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return torch::from_blob(text.data(), {static_cast<int64_t>(text.size())}, torch::kUInt8).clone();
}

// Map-style dataset of windows of C = context bytes: item i is the input
// text[i*C, i*C + C) and the target text[i*C + 1, i*C + C + 1).
class ByteWindows : public torch::data::datasets::Dataset<ByteWindows> {
 public:
  ByteWindows(torch::Tensor text, int64_t context) : text_(std::move(text)), context_(context) {}
  torch::data::Example<> get(size_t index) override {
    const int64_t start = static_cast<int64_t>(index) * context_;
    auto window = text_.slice(0, start, start + context_ + 1).to(torch::kLong);
    return {window.slice(0, 0, context_), window.slice(0, 1, context_ + 1)};
  }
  torch::optional<size_t> size() const override {
    return static_cast<size_t>(std::max<int64_t>(0, (text_.size(0) - 1) / context_));
  }

 private:
  torch::Tensor text_;
  int64_t context_;
};

// This process's peak resident memory in MiB (VmHWM of /proc/self/status).
double peak_resident_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  1234 kB"
  }
  return std::nan("");
}

int64_t count(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

// FLOPs to train on one window (forward and backward: 3 times the forward's
// 2 per multiply-add of every matmul; attention's scores and mix included).
double flops_per_window(const GptConfig& c) {
  const double d = c.d_model, t = c.context;
  const double per_token = 6.0 * (12.0 * c.layers * d * d + d * kVocab) + 12.0 * c.layers * t * d;
  return per_token * t;
}

}  // namespace

int train(int argc, char** argv) {
  GptConfig cfg;
  std::string data_dir = kFortuneDir;
  int64_t epochs = 1, batch_size = 16, max_steps = 0;
  double lr = 3e-4;
  // Its flags: --strategy, --checkpoint-dir, --resume, --precision, --progress, ...
  rankwise::FabricOptions options;
  options.checkpoint_dir("gpt_fortunes_checkpoints");
  CLI::App app{
      "A small GPT trained byte by byte on Debian's fortunes (run it through rankwise-run)"};
  using rankwise::fabric::integer_in;
  app.add_option("--layers", cfg.layers, "transformer blocks")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  app.add_option("--d-model,--d_model", cfg.d_model, "width of the model")
      ->check(integer_in(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--heads", cfg.heads, "attention heads (divide --d-model)")
      ->check(integer_in(1, 1024))
      ->capture_default_str();
  app.add_option("--context", cfg.context, "bytes per window")
      ->check(integer_in(1, 1 << 16))
      ->capture_default_str();
  app.add_flag("--tied", cfg.tied, "tie the head to the byte embedding");
  app.add_option("--batch-size,--batch_size", batch_size, "windows per batch per process")
      ->check(integer_in(1, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--epochs", epochs, "epochs (the run's total)")
      ->check(integer_in(1, 1000000))
      ->capture_default_str();
  app.add_option("--max-steps,--max_steps", max_steps,
                 "at most N training steps per epoch (0: the whole epoch)")
      ->check(integer_in(0, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--lr", lr, "learning rate of AdamW")
      ->check(rankwise::fabric::number_in(1e-12, 1e6))
      ->capture_default_str();
  app.add_option("--data-dir,--data_dir", data_dir, "directory of the fortune files")
      ->capture_default_str();
  rankwise::fabric::add_fabric_options(app, options);
  RANKWISE_CLI_PARSE(app, argc, argv);  // CLI11_PARSE, with --help printed once
  if (cfg.d_model % cfg.heads != 0) {
    if (rankwise::is_rank_zero()) {
      std::cerr << fmt::format("gpt_fortunes: --d-model {} is not a multiple of --heads {}\n",
                               cfg.d_model, cfg.heads);
    }
    return 2;
  }
  // The text, before the process group: without it every rank exits with 2.
  // Its last 5% is held out for validation.
  const auto text =
      std::filesystem::is_directory(data_dir) ? read_fortunes(data_dir) : torch::Tensor();
  const int64_t split = text.defined() ? text.size(0) - text.size(0) / 20 : 0;
  if (!text.defined() || (text.size(0) - split - 1) / cfg.context < 1) {
    if (rankwise::is_rank_zero()) {
      std::cerr << fmt::format(
          "gpt_fortunes: {} {}; the fortune files come with the Debian package fortunes "
          "(apt-get install fortunes, or scripts/setup)\n",
          data_dir,
          text.defined() ? "holds too little text for a validation window" : "is not a directory");
    }
    return 2;
  }
  // metrics.jsonl beside the checkpoints, with MFU (the Fabric counts Linear layers only)
  if (options.metrics_dir().empty()) options.metrics_dir(options.checkpoint_dir());
  if (options.flops_per_sample() == 0) options.flops_per_sample(flops_per_window(cfg));

  // Process group, device, seed, header, checkpoints, metrics log, progress.
  rankwise::Fabric fabric(options);
  fabric.log_hyperparams({{"layers", cfg.layers},
                          {"d_model", cfg.d_model},
                          {"heads", cfg.heads},
                          {"context", cfg.context},
                          {"tied", cfg.tied},
                          {"epochs", epochs},
                          {"lr", lr}});
  ByteWindows train_set(text.slice(0, 0, split), cfg.context),
      val_set(text.slice(0, split), cfg.context);
  fabric.print0(
      "{} bytes of fortunes from {}: {} training windows, {} validation windows of {} bytes",
      text.size(0), data_dir, *train_set.size(), *val_set.size(), cfg.context);

  Gpt gpt(cfg);
  const int64_t total_params = count(gpt->parameters());
  auto model = fabric.setup_module(gpt);  // DDP, or FSDP (each block a unit) with --strategy fsdp
  torch::optim::AdamW optimizer(model.parameters(),
                                torch::optim::AdamWOptions(lr).weight_decay(0.1));
  fabric.setup_optimizers(optimizer);  // under zero1 a sharded AdamW; under fsdp this rank's shards
  auto loader =
      fabric.setup_dataloader(train_set.map(torch::data::transforms::Stack<>()), batch_size);
  auto val_loader =
      fabric.setup_eval_dataloader(val_set.map(torch::data::transforms::Stack<>()), 4 * batch_size);

  rankwise::metrics::MetricCollection train_metrics;
  auto train_loss = train_metrics.add("loss", std::make_shared<rankwise::metrics::Mean>());
  fabric.track("train", train_metrics);  // checkpointed; reset at each epoch's start
  auto loss_per_byte = [](const torch::Tensor& logits, const torch::Tensor& target) {
    return torch::cross_entropy_loss(logits.reshape({-1, kVocab}), target.reshape({-1}), {},
                                     torch::Reduction::None);
  };

  // Validation: every window once across ranks, the loss summed per byte and
  // counted, both reduced, then divided once. Under fsdp each forward is
  // collective, so a rank with fewer batches runs forwards to match the others.
  auto validate = [&] {
    torch::NoGradGuard no_grad;
    rankwise::metrics::Mean mean;
    int64_t batches = 0;
    for (auto& batch : val_loader) {
      mean.update(loss_per_byte(model(batch.data), batch.target));
      ++batches;
    }
    const double most =
        fabric.all_reduce(static_cast<double>(batches), rankwise::dist::ReduceOp::kMax);
    const auto filler = torch::zeros(
        {1, cfg.context}, torch::TensorOptions().dtype(torch::kLong).device(fabric.device()));
    for (; batches < most; ++batches) model(filler);
    return mean.compute().item<double>();
  };

  double val_loss = std::nan("");
  // From a resumed run's epoch (and position); progress, checkpoints at each
  // epoch's end and on schedule.
  for (int64_t epoch : fabric.epochs(epochs)) {
    int64_t step_in_epoch = loader.next_pass().done, steps = 0;
    const auto started = std::chrono::steady_clock::now();
    for (auto& batch : loader) {
      if (max_steps > 0 && step_in_epoch >= max_steps) break;  // the epoch ends here (and is saved)
      auto per_byte = loss_per_byte(model(batch.data), batch.target);
      fabric.backward(per_byte.mean());
      if (!fabric.is_accumulating()) fabric.clip_gradients(1.0);
      fabric.optimizer_step();
      train_loss->update(per_byte.view({batch.data.size(0), -1}).mean(1).detach(),
                         loader.padding_mask());
      ++step_in_epoch, ++steps;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    val_loss = validate();
    const double loss = train_metrics.compute().at("loss").item<double>();
    fabric.print0(
        "epoch {}/{} | train loss {:.4f} | validation loss {:.4f} ({:.3f} bits per byte) | "
        "{} steps, {:.2f} steps/s, {:.0f} bytes/s at world size {}",
        epoch + 1, epochs, loss, val_loss, val_loss / std::log(2.0), steps, steps / seconds,
        steps * batch_size * cfg.context * fabric.world_size() / seconds, fabric.world_size());
    fabric.log("val_loss", val_loss);
    fabric.log_epoch({{"train_loss", loss}, {"val_loss", val_loss}});  // rank 0 writes
  }
  if (std::isnan(val_loss)) val_loss = validate();  // a resumed run that was already done

  // A greedy sample: every rank runs every forward (fsdp gathers collectively), rank 0 prints.
  std::string sample = "The ";
  {
    torch::NoGradGuard no_grad;
    while (sample.size() < 4 + 200) {
      const auto start =
          static_cast<int64_t>(sample.size()) - std::min<int64_t>(sample.size(), cfg.context);
      std::vector<int64_t> window(sample.begin() + start, sample.end());
      for (auto& byte : window) byte &= 0xff;  // char may be signed
      auto logits = model(torch::tensor(window, torch::kLong).unsqueeze(0).to(fabric.device()));
      sample.push_back(static_cast<char>(logits[0][-1].argmax().item<int64_t>()));
    }
  }
  for (auto& c : sample) {
    if (c != '\n' &&
        (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f))
      c = '?';
  }
  fabric.print(
      "peak memory (VmHWM) {:.1f} MiB | parameters {} ({} held by this rank) | strategy {}",
      peak_resident_mib(), total_params, count(model.parameters()), fabric.options().strategy());
  fabric.print0("final validation loss {:.4f}", val_loss);
  fabric.print0("sample (greedy, 200 bytes after \"The \"):\n{}", sample);
  return 0;
}

// run_main reports an uncaught exception to the launcher, which shows it as the root cause.
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
