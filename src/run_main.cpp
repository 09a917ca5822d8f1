#include "rankwise/run_main.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "rankwise/env.h"
#include "rankwise/process_group.h"

namespace rankwise {

bool record_error(const std::string& message) {
  auto path = get_env("RANKWISE_ERROR_FILE");
  if (!path) path = get_env("TORCHELASTIC_ERROR_FILE");
  if (!path || path->empty()) return false;
  int my_rank = 0;
  try {
    my_rank = rank();
  } catch (const std::exception&) {
  }
  nlohmann::json record = {
      {"message", message},
      {"rank", my_rank},
      {"timestamp", std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()}};
  std::ofstream out(*path, std::ios::trunc);
  out << record.dump() << "\n";
  return static_cast<bool>(out);
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::string message = e.what();
    int my_rank = 0;
    try {
      my_rank = rank();
    } catch (const std::exception&) {
    }
    std::fprintf(stderr, "rankwise: rank %d: uncaught exception: %s\n", my_rank, message.c_str());
    std::fflush(stderr);
    record_error(message);
    return 1;
  }
}

}  // namespace rankwise
