#pragma once
/// \file idx.h
/// Reader for the IDX format of MNIST and Fashion-MNIST (LeCun et al.,
/// http://yann.lecun.com/exdb/mnist/), plain or gzip-compressed.

#include <torch/types.h>

#include <string>

namespace rankwise::data {

/// Reads an IDX file of unsigned bytes (type code 0x08) and returns a uint8
/// tensor of the dimensions in its header, e.g. [60000, 28, 28] for images and
/// [60000] for labels. Gzip is detected from the content (zlib). Throws
/// ConfigError naming the file when it is missing, has a bad magic number or
/// is truncated.
torch::Tensor read_idx(const std::string& path);

}  // namespace rankwise::data
