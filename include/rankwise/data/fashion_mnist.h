#pragma once
/// \file fashion_mnist.h
/// Fashion-MNIST (Xiao et al. 2017) from the Debian package
/// dataset-fashion-mnist: 60,000 training and 10,000 test images of 28x28.

#include <torch/types.h>

#include <string>

namespace rankwise::data {

/// Where Debian's dataset-fashion-mnist installs the four gzipped IDX files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Mean and standard deviation of the training pixels scaled to [0, 1]
/// (computed over all 60,000 training images).
constexpr double kFashionMnistMean = 0.2860;
constexpr double kFashionMnistStd = 0.3530;

/// One split of the data set.
struct FashionMnist {
  torch::Tensor images;  ///< float32 [N, 784]: pixel / 255, then (x - mean) / std if normalized
  torch::Tensor labels;  ///< int64 [N], class in [0, 10)
};

/// Loads the training split (train=true) or the test split from `dir`;
/// `normalize` standardizes pixels with kFashionMnistMean / kFashionMnistStd.
/// Throws ConfigError naming the missing or corrupt file and the Debian
/// package that provides it.
FashionMnist load_fashion_mnist(const std::string& dir, bool train, bool normalize = true);

}  // namespace rankwise::data
