// rankwise::data::read_idx() on arbitrary bytes (plain, or gzip when they start
// with gzip's magic number: zlib's gzread detects it from the content).
#include "fuzz_input.h"
#include "rankwise/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static rankwise_fuzz::InputFile file("idx");
  file.write(data, size);
  rankwise_fuzz::only_rankwise_errors("rankwise::read_idx", [&] {
    rankwise_fuzz::touch_tensor(rankwise::data::read_idx(file.path()));
  });
  return 0;
}
