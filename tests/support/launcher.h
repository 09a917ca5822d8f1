#pragma once
// Starts the built rankwise-run (RANKWISE_RUN_PATH) with arguments and
// environment, collects its stdout and stderr, exit code and running time.
// Shared by the unit tests that drive the launcher.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace rankwise::test {

using Clock = std::chrono::steady_clock;
inline const std::string kRun = RANKWISE_RUN_PATH;

struct Result {
  int code = -1;  // exit code, or 128+signal when the launcher was killed
  std::string out;
  std::string err;
  double seconds = 0;  // from start to exit
};

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// rankwise-run started with `args`, stdout and stderr captured.
class Launcher {
 public:
  explicit Launcher(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env = {}) {
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq) vars[std::string(*e, eq - *e)] = eq + 1;
    }
    vars["OMP_NUM_THREADS"] = "1";  // keeps the launcher's note out of stderr
    for (const auto& [k, v] : env) vars[k] = v;
    std::vector<std::string> env_strings, argv_strings{kRun};
    for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) std::abort();
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int devnull = ::open("/dev/null", O_RDONLY);
      ::dup2(devnull, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(kRun.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }

  ~Launcher() {
    if (!done_) {
      ::kill(pid_, SIGKILL);
      wait(30);
    }
  }

  pid_t pid() const { return pid_; }

  /// Reads the launcher's output until its stderr (wait_for_err) or stdout
  /// (wait_for_out) contains `text` (true), or `timeout_s` passed or it
  /// closed both streams (false). What was read is kept for wait().
  bool wait_for_err(const std::string& text, double timeout_s) { return wait_for(err_, text, timeout_s); }
  bool wait_for_out(const std::string& text, double timeout_s) { return wait_for(out_, text, timeout_s); }

  /// Collects the output until the launcher exits; kills it after `timeout_s`
  /// (counted from its start).
  Result wait(double timeout_s = 60) {
    const auto deadline = start_ + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    for (;;) {
      const int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (ms <= 0) {
        ADD_FAILURE() << "rankwise-run still running after " << timeout_s << " s; killed";
        ::kill(pid_, SIGKILL);
        break;
      }
      if (!read_some(ms)) break;
    }
    for (int* fd : {&out_fd_, &err_fd_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
    Result r;
    r.out = out_;
    r.err = err_;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    r.seconds = since(start_);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    done_ = true;
    return r;
  }

 private:
  bool wait_for(const std::string& stream, const std::string& text, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    while (stream.find(text) == std::string::npos) {
      const int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (ms <= 0 || !read_some(std::min(ms, 100))) return stream.find(text) != std::string::npos;
    }
    return true;
  }

  // One poll of both streams (at most `ms`), appending what they hold;
  // false once both are closed.
  bool read_some(int ms) {
    int* fds[2] = {&out_fd_, &err_fd_};
    std::string* sinks[2] = {&out_, &err_};
    if (out_fd_ < 0 && err_fd_ < 0) return false;
    pollfd p[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(p, 2, ms) < 0 && errno != EINTR) return false;
    for (int i = 0; i < 2; ++i) {
      if (*fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::read(*fds[i], buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(*fds[i]);
        *fds[i] = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;  // read so far
  bool done_ = false;
  Clock::time_point start_;
};

/// `err` without the launcher's note that a node has more workers than CPU
/// cores: it depends on the machine the tests run on, not on what they test
/// (LaunchRun.MoreWorkersThanCoresIsAWarning checks it).
inline std::string without_core_note(const std::string& err) {
  std::string kept;
  for (std::size_t at = 0; at < err.size();) {
    const std::size_t end = std::min(err.find('\n', at), err.size());
    const std::string line = err.substr(at, end - at);
    const bool note = line.rfind("rankwise-run: ", 0) == 0 && line.find(" CPU core") != std::string::npos &&
                      line.find("workers on this node") != std::string::npos;
    if (!note) kept += err.substr(at, end + 1 - at);
    at = end + 1;
  }
  return kept;
}

inline Result run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
  Result r = Launcher(args, env).wait();
  r.err = without_core_note(r.err);
  return r;
}

/// Checks `condition` until it holds (true) or `timeout_s` passed (false):
/// a wait on a state of another process or thread that shows no line.
inline bool eventually(const std::function<bool()>& condition, double timeout_s = 30) {
  const auto start = Clock::now();
  while (!condition()) {
    if (since(start) > timeout_s) return false;
    ::poll(nullptr, 0, 20);  // a poll interval, not a synchronisation
  }
  return true;
}

/// Waits until something listens on 127.0.0.1:`port` (at most 30 s): a
/// launcher that hosts the rendezvous store is up.
inline bool wait_for_listener(int port) {
  return eventually([port] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return up;
  });
}

}  // namespace rankwise::test
