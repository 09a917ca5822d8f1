#include "dist/c10_logging.h"

#include "core/check.h"

#include <c10/macros/Macros.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "compat/warning_handler.h"
#include "dist/c10d_text.h"
#include "util/io.h"

#if defined(C10_USE_GLOG)
#include <glog/logging.h>
#endif

namespace rankwise::dist {

namespace {

// This rank's "rank r/W". Never destroyed (nor the handler and sink below):
// libtorch's threads may still log while the process exits.
struct Where {
  std::mutex mutex;
  std::string label = "rank ?";
};
Where& this_rank() {
  static auto* where = new Where();
  return *where;
}

// "c10d" for the distributed engine (Reducer, Gloo, TCPStore), else "libtorch".
const char* component_of(const char* file) {
  return file != nullptr && std::strstr(file, "c10d") != nullptr ? "c10d" : "libtorch";
}

void emit(const char* severity, const char* file, const std::string& message) {
  std::string where;
  {
    std::lock_guard<std::mutex> lock(this_rank().mutex);
    where = this_rank().label;
  }
  util::write_line(STDERR_FILENO, core::message("{} from {} ({}): {}", severity, component_of(file),
                                                where, in_rankwise_terms(message)));
}

struct EmitWarning {
  static void receive(const char* file, const std::string& message) {
    emit("warning", file, message);
  }
};

#if defined(C10_USE_GLOG)
// c10's default warning handler (threads without ours) logs a TORCH_WARN as
// "Warning: <message> (function <name>)": the message alone.
std::string without_default_handler_frame(std::string text) {
  static const std::string prefix = "Warning: ";
  const auto function = text.rfind(" (function ");
  if (text.rfind(prefix, 0) == 0 && function != std::string::npos && text.back() == ')') {
    text = text.substr(prefix.size(), function - prefix.size());
  }
  return text;
}

class GlogSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char* full_filename, const char* /*base_filename*/,
            int /*line*/, const struct ::tm* /*time*/, const char* message,
            size_t message_len) override {
    static const char* const kWords[] = {"info", "warning", "error", "fatal error"};
    const char* word =
        severity >= 0 && severity < google::NUM_SEVERITIES ? kWords[severity] : "log";
    emit(word, full_filename, without_default_handler_frame(std::string(message, message_len)));
  }
};

// glog's own output off (no files, nothing raw on stderr); the sink instead.
void route_glog() {
  if (google::IsGoogleLoggingInitialized()) return;  // the program configured glog itself
  google::InitGoogleLogging("rankwise");
  for (int severity = 0; severity < google::NUM_SEVERITIES; ++severity) {
    google::SetLogDestination(severity, "");  // "": no log file for this severity
  }
  FLAGS_logtostderr = false;
  FLAGS_alsologtostderr = false;
  FLAGS_stderrthreshold = google::NUM_SEVERITIES;
  google::AddLogSink(new GlogSink());
}
#else
void route_glog() {}  // libtorch without glog (pip's wheels): c10 logs itself
#endif

c10::WarningHandler* rankwise_handler() {
  static auto* handler = new compat::ForwardingWarningHandler<EmitWarning>();
  return handler;
}

// c10's default handler: what a thread that never set one has. Read on the
// first call, which route_c10_messages makes before setting rankwise's.
c10::WarningHandler* c10_default_handler() {
  static c10::WarningHandler* const handler = compat::thread_warning_handler();
  return handler;
}

}  // namespace

void route_c10_messages(const std::string& where) {
  {
    std::lock_guard<std::mutex> lock(this_rank().mutex);
    this_rank().label = where;
  }
  c10_default_handler();  // before this thread's is set
  static std::once_flag glog_once;
  std::call_once(glog_once, route_glog);
  compat::set_thread_warning_handler(rankwise_handler());
}

void route_this_thread_c10_warnings() {
  // A handler the program set on this thread itself is left alone.
  if (compat::thread_warning_handler() == c10_default_handler()) {
    compat::set_thread_warning_handler(rankwise_handler());
  }
}

}  // namespace rankwise::dist
