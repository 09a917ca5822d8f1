// torch_peer_failure: one rank fails, the others then fail on the closed
// connection (a secondary "peer gone" error), for the launcher's root-cause
// tests. Run under rankwise-run with 2 or more ranks:
//
//   torch_peer_failure raise RANK SLOW_MS WHEN [c10d]
//       After a first barrier, rank RANK throws std::runtime_error("boom") out
//       of rankwise::run_main and is then slow, SLOW_MS, to exit after its
//       peers saw its connection close. WHEN is `at-exit`: an atexit handler
//       that runs after the process group's teardown (so its error file is
//       written before the peers fail); or `unwinding`: a destructor that runs
//       while the exception unwinds, after another destructor shut the group
//       down (so its peers fail before its error file exists).
//       The other ranks wait in a second barrier and fail there: in
//       rankwise::dist::barrier() (a rankwise::PeerError), or with `c10d` in c10d's
//       own barrier, whose raw error reaches run_main unwrapped.
//   torch_peer_failure kill RANK [SLOW_MS]
//       After a first barrier, rank RANK ends itself with SIGKILL (no error
//       file): at once, or with SLOW_MS after it shut the process group down
//       and waited SLOW_MS (so its peers fail before it does). The others wait
//       in a second barrier and fail there.
#include <signal.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "rankwise/dist/process_group.h"
#include "rankwise/run_main.h"

namespace {

int g_slow_ms = 0;

void sleep_slow() { std::this_thread::sleep_for(std::chrono::milliseconds(g_slow_ms)); }

extern "C" void slow_exit() { sleep_slow(); }

struct SlowDestructor {
  ~SlowDestructor() { sleep_slow(); }
};

struct ShutdownOnUnwind {
  ~ShutdownOnUnwind() { rankwise::dist::shutdown(); }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  const int failing = std::atoi(argv[2]);
  const std::string when = argc > 4 ? argv[4] : "";
  const bool raw = argc > 5 && std::string(argv[5]) == "c10d";
  const char* rank = std::getenv("RANK");
  if (argc > 3 && rank != nullptr && std::atoi(rank) == failing) {
    g_slow_ms = std::atoi(argv[3]);
  }
  // Registered before init(): atexit handlers run in reverse order of
  // registration, so this one runs after the group's static destructor.
  if (when == "at-exit") std::atexit(slow_exit);
  return rankwise::run_main(argc, argv, [&](int, char**) {
    auto& group = rankwise::dist::init(rankwise::dist::InitOptions().timeout(std::chrono::seconds(60)));
    group.barrier();
    if (group.rank() == failing) {
      if (mode == "kill") {
        if (g_slow_ms > 0) {
          rankwise::dist::shutdown();
          sleep_slow();
        }
        ::raise(SIGKILL);
      }
      if (when != "unwinding") throw std::runtime_error("boom");
      SlowDestructor slow;         // destroyed second
      ShutdownOnUnwind shut_down;  // destroyed first
      throw std::runtime_error("boom");
    }
    if (raw) {
      group.c10d_group()->barrier()->wait();
    } else {
      group.barrier();
    }
    return 0;
  });
}
