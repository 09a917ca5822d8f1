// torch_epoch_world_change CKPT_DIR LOG_DIR LABEL [STOP_AT_STEP]: a Fabric
// training run (2 epochs of 23 samples, batch 2 per rank, a checkpoint after
// every step) that resumes from CKPT_DIR's latest checkpoint, at whatever
// world size it is started with. Each rank writes the sample indices it
// trained on (padding duplicates left out) to LOG_DIR/LABEL-rank<r>.txt, one
// "epoch index" line each; a tracked Sum counts them, and rank 0 prints
// "epoch E: counted N samples" at each epoch end. With STOP_AT_STEP every
// rank exits (code 0) once that many steps are checkpointed, before training
// on the next batch: the run stops mid-epoch with nothing trained beyond its
// last checkpoint. Rank 0 prints where each pass starts (FabricLoader::
// next_pass()). Used by tests/e2e/epoch_world_change.sh.
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>

#include "rankwise/rankwise.h"

namespace {

// Sample i is the row [i] with label i % 2 (float32 [B, 1], int64 [B]).
class Indices : public torch::data::datasets::BatchDataset<Indices, torch::data::Example<>> {
 public:
  explicit Indices(int64_t n) : n_(n) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto i = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
    return {i.to(torch::kFloat32).unsqueeze(1), i.remainder(2)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

int train(int argc, char** argv) {
  if (argc < 4) {
    throw rankwise::ConfigError("usage: torch_epoch_world_change CKPT_DIR LOG_DIR LABEL [STOP_AT_STEP]");
  }
  const std::string label = argv[3];
  const int64_t stop_at = argc > 4 ? std::stoll(argv[4]) : 0;
  rankwise::Fabric fabric(rankwise::FabricOptions()
                              .print_header(false)
                              .seed(5)
                              .checkpoint_dir(argv[1])
                              .checkpoint_every(1)
                              .resume(rankwise::Resume::kLatest));
  auto net = torch::nn::Linear(1, 2);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.01));
  auto ddp = fabric.setup(net, optimizer);
  auto loader = fabric.setup_dataloader(Indices(23), 2);
  rankwise::metrics::MetricCollection metrics;
  auto count = metrics.add("count", std::make_shared<rankwise::metrics::Sum>());
  fabric.track("train", metrics);
  std::ofstream log(std::string(argv[2]) + "/" + label + "-rank" + std::to_string(fabric.rank()) +
                    ".txt");
  for (int64_t epoch : fabric.epochs(2)) {
    const auto pass = loader.next_pass();
    fabric.print0("epoch {}: pass starts at batch {} of {}", epoch + 1, pass.done, pass.total);
    for (auto& batch : loader) {
      if (stop_at > 0 && fabric.step() == stop_at) {
        log.flush();
        std::_Exit(0);  // every rank, after the same checkpoint
      }
      const auto mask = loader.padding_mask();
      const auto indices = batch.data.squeeze(1).to(torch::kInt64);
      const auto keep = mask.keep(indices.size(0), "torch_epoch_world_change");
      for (int64_t i = 0; i < indices.size(0); ++i) {
        if (keep[i].item<bool>()) log << epoch << " " << indices[i].item<int64_t>() << "\n";
      }
      optimizer.zero_grad();
      fabric.backward(torch::cross_entropy_loss(ddp.forward(batch.data), batch.target));
      optimizer.step();
      count->update(torch::ones({indices.size(0)}, torch::kFloat64), mask);
    }
    const auto counted = metrics.compute().at("count").item<double>();
    fabric.print0("epoch {}: counted {} samples", epoch + 1, static_cast<int64_t>(counted));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return rankwise::run_main(argc, argv, train); }
