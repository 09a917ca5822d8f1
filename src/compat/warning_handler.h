#pragma once
// c10's warning-handler API, which differs between the libtorch versions
// rankwise supports: libtorch 1.13 has namespace c10::Warning with
// WarningHandler::process(SourceLocation, msg, verbatim); libtorch 2.x has
// class c10::Warning, namespace c10::WarningUtils and
// WarningHandler::process(const c10::Warning&). Both keep one handler per
// thread. A namespace that became a class cannot be told apart by overload
// or SFINAE, so this is the one place that tests TORCH_VERSION_MAJOR.
// Used only by src/dist/c10_logging.cpp.
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <string>

namespace rankwise::compat {

/// A c10::WarningHandler that passes each TORCH_WARN to `Receive`, a type
/// with `static void receive(const char* file, const std::string& msg)`.
template <typename Receive>
class ForwardingWarningHandler : public c10::WarningHandler {
 public:
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override {
    Receive::receive(warning.source_location().file, warning.msg());
  }
#else
  void process(const c10::SourceLocation& location, const std::string& msg,
               const bool /*verbatim*/) override {
    Receive::receive(location.file, msg);
  }
#endif
};

/// The calling thread's c10 warning handler (c10's default one until set).
inline c10::WarningHandler* thread_warning_handler() {
#if TORCH_VERSION_MAJOR >= 2
  return c10::WarningUtils::get_warning_handler();
#else
  return c10::Warning::get_warning_handler();
#endif
}

/// Makes `handler` the calling thread's c10 warning handler.
inline void set_thread_warning_handler(c10::WarningHandler* handler) {
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::set_warning_handler(handler);
#else
  c10::Warning::set_warning_handler(handler);
#endif
}

}  // namespace rankwise::compat
