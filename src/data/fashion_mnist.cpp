#include "rankwise/data/fashion_mnist.h"

#include "core/check.h"

#include <torch/torch.h>

#include "rankwise/data/idx.h"
#include "rankwise/error.h"

namespace rankwise::data {

FashionMnist load_fashion_mnist(const std::string& dir, bool train, bool normalize) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto read = [](const std::string& path) {
    try {
      return read_idx(path);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string(e.what()) +
                        ". Fashion-MNIST comes from the Debian package dataset-fashion-mnist "
                        "(apt-get install dataset-fashion-mnist, or run scripts/setup), or pass "
                        "--data-dir");
    }
  };
  auto images = read(prefix + "-images-idx3-ubyte.gz");
  auto labels = read(prefix + "-labels-idx1-ubyte.gz");
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0)) {
    core::raise<ConfigError>(
        "Fashion-MNIST files in '{}' disagree: images and labels must have the same count", dir);
  }
  FashionMnist data;
  data.images = images.reshape({images.size(0), -1}).to(torch::kFloat32).div_(255.0);
  if (normalize) data.images.sub_(kFashionMnistMean).div_(kFashionMnistStd);
  data.labels = labels.to(torch::kInt64);
  return data;
}

}  // namespace rankwise::data
