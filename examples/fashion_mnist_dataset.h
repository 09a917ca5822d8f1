#pragma once
// Fashion-MNIST as a libtorch batch dataset (torch::data), shared by the
// main job (fashion_mnist.cpp) and its one-process original
// (fashion_mnist_plain.cpp): get_batch(indices) gathers the rows of the
// images (float32 [N, 784], standardized) and labels (int64 [N]) tensors.
#include <torch/torch.h>

#include <algorithm>

#include "rankwise/data/fashion_mnist.h"

class FashionMnistDataset
    : public torch::data::datasets::BatchDataset<FashionMnistDataset, torch::data::Example<>> {
 public:
  /// The training (train) or test split from `dir`; `limit` > 0 keeps its
  /// first `limit` samples. Throws rankwise::ConfigError for missing files.
  FashionMnistDataset(const std::string& dir, bool train, int64_t limit = 0) {
    auto split = rankwise::data::load_fashion_mnist(dir, train);
    const auto n = limit > 0 ? std::min(limit, split.images.size(0)) : split.images.size(0);
    images_ = split.images.narrow(0, 0, n);
    labels_ = split.labels.narrow(0, 0, n);
  }
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    auto rows = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
    return {images_.index_select(0, rows), labels_.index_select(0, rows)};
  }
  c10::optional<size_t> size() const override { return static_cast<size_t>(images_.size(0)); }

 private:
  torch::Tensor images_, labels_;
};
