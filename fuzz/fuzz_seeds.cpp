// Writes seed checkpoints with rankwise::checkpoint::save into the directory given: the
// kinds of values rankwise's own checkpoints hold (tensors of several dtypes
// and layouts, nested dicts and lists, scalars, strings). fuzz/make_seeds runs it.
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "rankwise/checkpoint/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  {
    rankwise::checkpoint::Checkpoint c;
    c.insert("step", int64_t{7});
    c.insert("lr", 0.5);
    c.insert("name", std::string("seed"));
    c.insert("flag", true);
    rankwise::checkpoint::save(dir + "/scalars.pt", c);
  }
  {
    rankwise::checkpoint::Checkpoint c;
    c.insert("w", torch::arange(6, torch::kFloat32).reshape({2, 3}));
    c.insert("b", torch::tensor({1, 2}, torch::kInt64));
    c.insert("t", torch::arange(6, torch::kFloat64).reshape({2, 3}).t());  // strided view
    c.insert("h", torch::ones({3}, torch::kFloat16));
    c.insert("u", torch::zeros({0}, torch::kUInt8));
    rankwise::checkpoint::save(dir + "/tensors.pt", c);
  }
  {
    c10::impl::GenericDict model(c10::StringType::get(), c10::TensorType::get());
    model.insert("fc.weight", torch::full({2, 2}, 0.25));
    model.insert("fc.bias", torch::zeros({2}));
    c10::impl::GenericList steps(c10::IntType::get());
    steps.push_back(1);
    steps.push_back(2);
    rankwise::checkpoint::Checkpoint c;
    c.insert("model", model);
    c.insert("steps", steps);
    c.insert("pair", c10::ivalue::Tuple::create({c10::IValue(int64_t{3}), c10::IValue(std::string("x"))}));
    rankwise::checkpoint::save(dir + "/nested.pt", c);
  }
  return 0;
}
