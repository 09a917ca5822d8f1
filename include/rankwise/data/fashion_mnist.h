#pragma once
/// \file data/fashion_mnist.h
/// Fashion-MNIST (Xiao et al. 2017) from the Debian package
/// dataset-fashion-mnist: 60,000 training and 10,000 test images of 28x28.

#include <torch/types.h>

#include <string>

namespace rankwise {

/// Where Debian's dataset-fashion-mnist installs the four gzipped IDX files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// One split of the data set.
struct FashionMnist {
  torch::Tensor images;  ///< float32 [N, 784], pixel / 255 in [0, 1]
  torch::Tensor labels;  ///< int64 [N], class in [0, 10)
};

/// Loads the training split (train=true) or the test split from `dir`.
/// Throws ConfigError naming the missing or corrupt file and the Debian
/// package that provides it.
FashionMnist load_fashion_mnist(const std::string& dir, bool train);

}  // namespace rankwise
