// Port of seed 000's ch02-DDP-script: a toy data set of 5 training and 2 test
// samples, an MLP 2->30->20->2, SGD lr 0.5, batch 2 per rank, 3 epochs.
// Every rank trains and prints its own loss; the test accuracy is reduced
// across ranks (each test sample counted once) and printed once, by rank 0.
//
//   rankwise-run --nproc-per-node 2 --tag '[GPU{local_rank}] ' build/examples/toy_ddp
#include <torch/torch.h>

#include "rankwise/rankwise.h"

struct NeuralNetworkImpl : torch::nn::Module {
  NeuralNetworkImpl(int64_t num_inputs, int64_t num_outputs)
      : layers(torch::nn::Linear(num_inputs, 30), torch::nn::ReLU(), torch::nn::Linear(30, 20),
               torch::nn::ReLU(), torch::nn::Linear(20, num_outputs)) {
    register_module("layers", layers);
  }
  torch::Tensor forward(const torch::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers;
};
TORCH_MODULE(NeuralNetwork);

int run(int, char**) {
  auto& group = rankwise::dist::init();
  rankwise::monitor::print_header();

  const auto x_train = torch::tensor({{-1.2, 3.1}, {-0.9, 2.9}, {-0.5, 2.6}, {2.3, -1.1}, {2.7, -1.5}},
                                     torch::kFloat32);
  const auto y_train = torch::tensor({0, 0, 0, 1, 1}, torch::kInt64);
  const auto x_test = torch::tensor({{-0.8, 2.8}, {2.6, -1.6}}, torch::kFloat32);
  const auto y_test = torch::tensor({0, 1}, torch::kInt64);

  torch::manual_seed(123);
  NeuralNetwork model(2, 2);
  rankwise::parallel::DistributedDataParallel ddp(model);
  torch::optim::SGD optimizer(ddp.parameters(), torch::optim::SGDOptions(0.5));

  rankwise::data::DistributedSampler sampler(x_train.size(0));  // shuffled, padded like PyTorch's
  const int64_t batch_size = 2;
  const int num_epochs = 3;
  for (int epoch = 0; epoch < num_epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const auto indices = sampler.indices();
    ddp.module()->train();
    // drop_last batches, as the seed's DataLoader(drop_last=True)
    for (std::size_t start = 0; start + batch_size <= indices.size(); start += batch_size) {
      auto idx = torch::tensor(std::vector<int64_t>(indices.begin() + start,
                                                    indices.begin() + start + batch_size));
      auto features = x_train.index_select(0, idx);
      auto labels = y_train.index_select(0, idx);
      auto loss = torch::cross_entropy_loss(ddp.forward(features), labels);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      rankwise::print("Epoch: {:03d}/{:03d} | Batchsize {:03d} | Train/Val Loss: {:.2f}", epoch + 1,
                      num_epochs, labels.size(0), loss.item<double>());
    }
  }

  // Test accuracy over the whole test set: each sample exactly once across
  // ranks (no padding), correct and total counts reduced, then divided once.
  ddp.module()->eval();
  torch::NoGradGuard no_grad;
  rankwise::data::DistributedSampler test_sampler(
      x_test.size(0), rankwise::data::DistributedSamplerOptions().shuffle(false).pad(false));
  auto counts = torch::zeros({2}, torch::kInt64);
  const auto test_indices = test_sampler.indices();
  if (!test_indices.empty()) {
    auto idx = torch::tensor(test_indices);
    auto predictions = ddp.forward(x_test.index_select(0, idx)).argmax(1);
    counts[0] = predictions.eq(y_test.index_select(0, idx)).sum();
    counts[1] = static_cast<int64_t>(test_indices.size());
  }
  rankwise::dist::all_reduce(counts);  // every rank, outside the print guard
  const double accuracy = static_cast<double>(counts[0].item<int64_t>()) /
                          static_cast<double>(counts[1].item<int64_t>());
  rankwise::print0("Test accuracy: {:.2f} ({} of {} samples, {} ranks)", accuracy,
                   counts[0].item<int64_t>(), counts[1].item<int64_t>(), group.world_size());
  return 0;
}

// run_main reports an uncaught exception to the launcher (root cause).
int main(int argc, char** argv) { return rankwise::run_main(argc, argv, run); }
