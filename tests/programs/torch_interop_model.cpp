// The C++ side of the checkpoint interop tests with Python (tests/python/checkpoint_interop.py).
//
//   torch_interop_model write CKPT          trains the model a little, saves a training state
//                                           with extras probe_input / probe_output (eval mode)
//   torch_interop_model read SD PROBE [ATOL]  loads a state_dict saved by Python's torch.save
//                                           (keys prefixed "module.", as DDP writes them) and
//                                           prints "equal" when the model's output on
//                                           PROBE["input"] is bitwise PROBE["output"]
//                                           (with ATOL: "close" when within ATOL, for a PROBE
//                                           written by another torch version)
//   torch_interop_model read-full CKPT PROBE [ATOL]  the same with CKPT["model"] of a Python
//                                           training checkpoint
//   torch_interop_model fingerprint FILE [KEY]  prints the CRC-32 of FILE's state_dict
//                                           (FILE[KEY] when given), as checkpoint_interop.py
//                                           fingerprint does: the two sides read the same bytes
// The model matches Net in checkpoint_interop.py: fc1 Linear(4, 8), bn
// BatchNorm1d(8), fc2 Linear(8, 3); forward fc2(relu(bn(fc1(x)))).
#include <torch/torch.h>

#include <zlib.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "rankwise/checkpoint/checkpoint.h"
#include "rankwise/checkpoint/state_dict.h"
#include "rankwise/checkpoint/training_state.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 8))),
        bn(register_module("bn", torch::nn::BatchNorm1d(8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

// CRC-32 over the entries sorted by name: for each, the name, a NUL, then the
// tensor's bytes (contiguous, this machine's little-endian order). Defined
// identically in checkpoint_interop.py.
uLong fingerprint(const c10::IValue& state_dict) {
  std::map<std::string, torch::Tensor> sorted;
  for (const auto& entry : state_dict.toGenericDict()) {
    sorted[entry.key().toStringRef()] = entry.value().toTensor().contiguous();
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& [name, tensor] : sorted) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(name.c_str()), static_cast<uInt>(name.size() + 1));
    crc = crc32(crc, static_cast<const Bytef*>(tensor.data_ptr()), static_cast<uInt>(tensor.nbytes()));
  }
  return crc;
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "write" && argc == 3) {
      torch::manual_seed(11);
      Net net;
      torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      for (int i = 0; i < 3; ++i) {  // moves weights and BatchNorm's running statistics
        opt.zero_grad();
        net->forward(torch::randn({16, 4})).pow(2).mean().backward();
        opt.step();
      }
      net->eval();
      const auto probe = torch::randn({5, 4});
      rankwise::checkpoint::TrainingState state;
      state.model = net.get();
      state.optimizer = &opt;
      state.step = 3;
      state.extras["probe_input"] = probe;
      state.extras["probe_output"] = net->forward(probe).detach();
      rankwise::checkpoint::save(argv[2], rankwise::checkpoint::capture(state));
      std::cout << "written\n";
      return 0;
    }
    if ((mode == "read" || mode == "read-full") && (argc == 4 || argc == 5)) {
      Net net;
      const auto file = rankwise::checkpoint::load(argv[2]);
      rankwise::checkpoint::load_state_dict(
          *net, rankwise::checkpoint::to_state_dict(mode == "read" ? c10::IValue(file.dict()) : file.at("model")));
      net->eval();
      const auto probe = rankwise::checkpoint::load(argv[3]);
      const auto output = net->forward(probe.at("input").toTensor());
      const auto expected = probe.at("output").toTensor();
      if (argc == 4 && torch::equal(output, expected)) {
        std::cout << "equal\n";
        return 0;
      }
      if (argc == 5 && torch::allclose(output, expected, /*rtol=*/0, /*atol=*/std::stod(argv[4]))) {
        std::cout << "close\n";
        return 0;
      }
      std::cout << "different: max abs diff " << (output - expected).abs().max().item<double>() << "\n";
      return 1;
    }
    if (mode == "fingerprint" && (argc == 3 || argc == 4)) {
      const auto file = rankwise::checkpoint::load(argv[2]);
      std::cout << "fingerprint " << fingerprint(argc == 4 ? file.at(argv[3]) : c10::IValue(file.dict())) << "\n";
      return 0;
    }
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: torch_interop_model write CKPT | read SD PROBE [ATOL] | read-full CKPT PROBE [ATOL] | fingerprint FILE [KEY]\n";
  return 2;
}
