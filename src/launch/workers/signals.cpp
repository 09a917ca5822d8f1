#include "launch/workers/signals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <system_error>

namespace rankwise::launch::workers {

namespace {
int g_pipe[2] = {-1, -1};
pid_t g_owner = -1;  // the launcher's pid

extern "C" void on_signal(int sig) {
  const int saved = errno;
  if (::getpid() != g_owner) {
    // A forked worker that still has this handler: take the default action.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    errno = saved;
    return;
  }
  const unsigned char byte = static_cast<unsigned char>(sig);
  (void)!::write(g_pipe[1], &byte, 1);  // full pipe: a wake-up is pending anyway
  errno = saved;
}
}  // namespace

void install_signal_pipe() {
  if (g_pipe[0] >= 0) return;
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe");
  }
  g_owner = ::getpid();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

int signal_pipe_fd() { return g_pipe[0]; }

std::vector<int> drain_signals() {
  std::vector<int> sigs;
  unsigned char buf[64];
  for (;;) {
    const ssize_t n = ::read(g_pipe[0], buf, sizeof(buf));
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) sigs.push_back(buf[i]);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  return sigs;
}

int drain_stop_signal() {
  for (int sig : drain_signals()) {
    if (sig != SIGCHLD) return sig;
  }
  return 0;
}

}  // namespace rankwise::launch::workers
