#include "dist/gloo_abort.h"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>

#include "rankwise/diag/flight_recorder.h"
#include "rankwise/run_main.h"
#include "wire/error_file.h"

namespace rankwise::dist {

namespace {

constexpr std::string_view kEnforce = "[enforce fail at ";
constexpr std::string_view kSizeCheck = "op.preamble.length <= op.nbytes.";

std::mutex handler_mutex;
std::weak_ptr<const diag::FlightRecorder> handler_recorder;
core::At handler_at;
std::terminate_handler previous_handler = nullptr;
bool installed = false;

// The last collective this rank entered; nullopt when none.
std::optional<diag::CollectiveRecord> last_collective() {
  std::shared_ptr<const diag::FlightRecorder> recorder;
  {
    std::lock_guard<std::mutex> lock(handler_mutex);
    recorder = handler_recorder.lock();
  }
  if (!recorder) return std::nullopt;
  diag::CollectiveRecord last = recorder->last_entered();
  if (last.sequence == 0) return std::nullopt;
  return last;
}

// What to do about ranks that sent different sizes to `last`.
std::string size_advice(const diag::CollectiveRecord* last) {
  if (last != nullptr && !last->checked && !last->name.empty()) {
    return fmt::format(
        "'{}' is one of rankwise's own collectives, which are not checked ahead: the ranks ran "
        "different steps of the model here (a FullyShardedDataParallel unit or a DDP bucket "
        "skipped, or run in another order, on some rank, or a peer in another collective): every "
        "rank must run the same model code in the same order",
        last->name);
  }
  if (last != nullptr && last->checked) {
    return "Every rank's call was compared before it ran and agreed, so a peer's bytes came from "
           "another collective; compare the ranks' flight records (RANKWISE_FLIGHT_RECORDER_DIR)";
  }
  return "Give every rank a tensor of the same shape and dtype there; RANKWISE_DEBUG=detail "
         "(or InitOptions::check_collectives) names each rank's shape before Gloo sees them";
}

[[noreturn]] void on_terminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      core::At at;
      {
        std::lock_guard<std::mutex> lock(handler_mutex);
        at = handler_at;
      }
      const auto last = last_collective();
      const std::string message = explain_gloo_abort(ex.what(), last ? &*last : nullptr, at);
      if (!message.empty()) {
        std::fprintf(stderr, "%s\n",
                     fmt::format(wire::kUncaughtExceptionFormat, at.rank, message).c_str());
        std::fflush(stderr);
        record_error(message, false);
      }
    } catch (...) {
    }
  }
  if (previous_handler != nullptr) previous_handler();
  std::abort();
}

}  // namespace

std::string explain_gloo_abort(const std::string& what, const diag::CollectiveRecord* last,
                               core::At at) {
  if (what.find(kEnforce) == std::string::npos) return "";
  const std::string in = last == nullptr ? "" : fmt::format(" in {}", diag::describe(*last));
  const auto size_check = what.find(kSizeCheck);
  if (size_check == std::string::npos) {
    return core::message(at, "a fatal check of Gloo's (or c10's) failed{}: {}", in, what);
  }
  long long sent = 0, expected = 0;
  const std::string sizes = what.substr(size_check + kSizeCheck.size());
  const std::string fix = size_advice(last);
  const bool known = std::sscanf(sizes.c_str(), " %lld vs %lld", &sent, &expected) == 2;
  return core::message(
      at,
      "Gloo aborted this process{}: the ranks sent different sizes to the same collective ({}). "
      "{}. Gloo's text: {}",
      in,
      known
          ? fmt::format("a peer sent {} bytes where this rank expected at most {}", sent, expected)
          : "a peer sent more bytes than this rank expected",
      fix, what);
}

void install_gloo_abort_report(std::shared_ptr<const diag::FlightRecorder> recorder, core::At at) {
  std::lock_guard<std::mutex> lock(handler_mutex);
  handler_recorder = recorder;
  handler_at = at;
  if (!installed) {
    previous_handler = std::set_terminate(on_terminate);
    installed = true;
  }
}

}  // namespace rankwise::dist
