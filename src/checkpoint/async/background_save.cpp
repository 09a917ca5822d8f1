#include "checkpoint/async/background_save.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>

namespace rankwise::checkpoint::async {

BackgroundSave::~BackgroundSave() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundSave::start(std::function<void()> work) {
  if (thread_.joinable()) throw std::logic_error("BackgroundSave::start while a save is in flight");
  error_ = nullptr;
  thread_ = std::thread([this, work = std::move(work)] {
    try {
      work();
    } catch (...) {
      error_ = std::current_exception();  // read after join()
    }
  });
}

std::chrono::duration<double, std::milli> BackgroundSave::finish() {
  const auto started = std::chrono::steady_clock::now();
  if (!thread_.joinable()) return {};
  thread_.join();
  const auto waited = std::chrono::steady_clock::now() - started;
  if (auto error = std::exchange(error_, nullptr)) std::rethrow_exception(error);
  return waited;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void exit_unwaited(const std::exception& error, const char* manager) {
  std::fprintf(stderr,
               "error: %s; the %s was destroyed without wait(), which would have raised this on "
               "every rank: call wait() before the end of the run\n",
               error.what(), manager);
  std::fflush(nullptr);
  std::_Exit(1);
}

}  // namespace rankwise::checkpoint::async
