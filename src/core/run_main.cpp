#include "rankwise/run_main.h"

#include <fmt/format.h>
#include <gloo/common/error.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "rankwise/env.h"
#include "rankwise/error.h"
#include "core/process_env.h"
#include "wire/error_file.h"
#include "util/io.h"

namespace rankwise {
namespace {

// This process's rank, 0 when even the environment does not say.
int rank_or_zero() {
  try {
    return core::process_env().rank;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

bool is_peer_gone(const std::exception& e) {
  if (dynamic_cast<const PeerError*>(&e) != nullptr) return true;
  if (dynamic_cast<const Error*>(&e) != nullptr) return false;
  // A raw c10d error from Gloo's transport (a peer's connection closed or
  // reset, or a read that timed out), e.g. from DDP's gradient all_reduce in
  // backward(): c10d rethrows Gloo's own exception, by type on both libtorch
  // versions (its message text is not relied on).
  return dynamic_cast<const ::gloo::IoException*>(&e) != nullptr;
}

bool record_error(const std::string& message, bool secondary) {
  auto path = get_env(wire::kErrorFileVariable);
  if (!path) path = get_env(wire::kTorchelasticErrorFileVariable);
  if (!path || path->empty()) return false;
  const std::string text =
      wire::encode_worker_error(message, rank_or_zero(), secondary, std::chrono::system_clock::now());
  // Written whole, then renamed: the launcher may read it while this rank runs.
  return util::write_then_rename(*path, text + "\n");
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    const std::string message = e.what();
    const std::string line = fmt::format(wire::kUncaughtExceptionFormat, rank_or_zero(), message);
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    record_error(message, is_peer_gone(e));
    return 1;
  }
}

}  // namespace rankwise
