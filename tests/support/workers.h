#pragma once
// Running the worker programs of tests/programs from a unit test: through
// rankwise-run, or by hand (torchrun's variables, a free loopback port) so
// that when one rank is killed the survivors report their errors instead of
// being stopped by the launcher; a fresh directory per test process; counting
// lines in their output. Shared by the sharded-checkpoint tests.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/shell.h"

namespace rankwise::test {

/// A fresh, empty directory `<tmp>/<prefix>_<name>_<pid>` (ctest -j runs each test in its own process).
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Occurrences of `what` in `text`.
inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// `worker args` on `nproc` ranks through the launcher `run` (rankwise-run):
/// the output (stdout and stderr), then "exit=N".
inline std::string run_launched(const std::string& run, int nproc, const std::string& worker, const std::string& args) {
  return shell(run + " --nproc-per-node " + std::to_string(nproc) + " " + worker + " " + args + " 2>&1; echo exit=$?");
}

/// Runs `worker args` on `nproc` ranks, in parallel, and waits for all;
/// `fault` goes into RANKWISE_CHECKPOINT_FAULT of `fault_rank` only (-1:
/// none). Each rank's output (stdout and stderr) is kept in
/// `logs/rank<R>.log`; returns them, by rank.
inline std::vector<std::string> run_by_hand(const std::string& worker, int nproc, int fault_rank,
                                            const std::string& fault, const std::string& args,
                                            const std::filesystem::path& logs) {
  int port = 0;
  {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      socklen_t n = sizeof a;
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
      port = ntohs(a.sin_port);
    }
    ::close(s);
  }
  std::string script;
  for (int r = 0; r < nproc; ++r) {
    script += "env RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(nproc) +
              " LOCAL_RANK=" + std::to_string(r) + " LOCAL_WORLD_SIZE=" + std::to_string(nproc) +
              " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
              (r == fault_rank ? " RANKWISE_CHECKPOINT_FAULT=" + fault : "") + " " + worker + " " + args + " > " +
              (logs / ("rank" + std::to_string(r) + ".log")).string() + " 2>&1 & ";
  }
  shell(script + "wait");
  std::vector<std::string> out;
  for (int r = 0; r < nproc; ++r) out.push_back(shell("cat " + (logs / ("rank" + std::to_string(r) + ".log")).string()));
  return out;
}

}  // namespace rankwise::test
