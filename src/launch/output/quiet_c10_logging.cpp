#include "launch/output/quiet_c10_logging.h"

#include <c10/macros/Macros.h>
#include <c10/util/Logging.h>

#if defined(C10_USE_GLOG)
#include <glog/logging.h>
#endif

namespace rankwise::launch::output {

void silence_libtorch_logging() {
#if defined(C10_USE_GLOG)
  if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging("rankwise-run");
  for (int severity = 0; severity < google::NUM_SEVERITIES; ++severity) {
    google::SetLogDestination(severity, "");  // no log file
  }
  FLAGS_logtostderr = false;
  FLAGS_alsologtostderr = false;
  FLAGS_stderrthreshold = google::NUM_SEVERITIES;
  FLAGS_minloglevel = google::GLOG_FATAL;
#endif
  FLAGS_caffe2_log_level = 3;  // fatal only: c10's logger and c10d's C10D_* macros
}

}  // namespace rankwise::launch::output
