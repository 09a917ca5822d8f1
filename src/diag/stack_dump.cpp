#include "diag/stack_dump.h"

#include <execinfo.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

// Everything the handler calls is async-signal-safe (open, read, write,
// close, getdents64, tgkill, nanosleep) except glibc's backtrace(), whose
// only unsafe step (loading libgcc_s on first use) is done at install time.

namespace rankwise::diag {

namespace {

constexpr int kMaxFrames = 64;
constexpr int kAnswerWaitMs = 500;  // per thread that does not answer

char g_path[4096];
bool g_has_path = false;
int g_fd = 2;
std::atomic<pid_t> g_dumper{0};        // thread writing the dump (0: none)
std::atomic<pid_t> g_target{0};        // thread asked for its own stack
std::atomic<bool> g_target_done{false};
bool g_installed = false;

pid_t thread_id() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

void put(const char* s, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(g_fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}
void put(const char* s) { put(s, std::strlen(s)); }

// Writes the decimal digits of `v` (>= 0) to `out` (room for 20) and returns
// how many; no allocation, no locale (snprintf is not async-signal-safe).
std::size_t format_number(long v, char* out) {
  char reversed[20];
  std::size_t n = 0;
  unsigned long u = static_cast<unsigned long>(v);
  do {
    reversed[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u > 0);
  for (std::size_t i = 0; i < n; ++i) out[i] = reversed[n - 1 - i];
  return n;
}

void put_number(long v) {
  char digits[20];
  put(digits, format_number(v, digits));
}

// "thread 1234 (name):" then the frames below the signal handler.
__attribute__((noinline)) void write_own_stack(pid_t tid) {
  put("thread ");
  put_number(tid);
  char path[64] = "/proc/self/task/";
  std::size_t len = std::strlen(path);
  len += format_number(tid, path + len);
  std::memcpy(path + len, "/comm", 6);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char name[32] = {};
    const ssize_t r = ::read(fd, name, sizeof(name) - 1);
    ::close(fd);
    if (r > 0) {
      if (name[r - 1] == '\n') name[r - 1] = '\0';
      put(" (");
      put(name);
      put(")");
    }
  }
  put(":\n");
  void* frames[kMaxFrames];
  const int count = ::backtrace(frames, kMaxFrames);
  // Frames 0-2: this function, the handler, the kernel's signal trampoline.
  constexpr int kSkip = 3;
  if (count > kSkip) ::backtrace_symbols_fd(frames + kSkip, count - kSkip, g_fd);
}

void sleep_ms(long ms) {
  timespec t{0, ms * 1000000L};
  while (::nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

struct LinuxDirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

void handler(int, siginfo_t*, void*) {
  const int saved_errno = errno;
  const pid_t me = thread_id();
  if (g_target.load() == me) {  // asked by the dumping thread
    write_own_stack(me);
    g_target_done.store(true);
    errno = saved_errno;
    return;
  }
  pid_t none = 0;
  if (!g_dumper.compare_exchange_strong(none, me)) {  // a dump is under way
    errno = saved_errno;
    return;
  }
  g_fd = 2;
  if (g_has_path) {
    const int fd = ::open(g_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) g_fd = fd;
  }
  put("stack dump of pid ");
  put_number(::getpid());
  put("\n");
  write_own_stack(me);
  const int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, dir, buf, sizeof(buf));
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        auto* entry = reinterpret_cast<LinuxDirent64*>(buf + off);
        off += entry->d_reclen;
        const pid_t tid = static_cast<pid_t>(std::atol(entry->d_name));
        if (tid <= 0 || tid == me) continue;
        g_target_done.store(false);
        g_target.store(tid);
        if (::syscall(SYS_tgkill, ::getpid(), tid, wire::kStackDumpSignal) == 0) {
          int waited = 0;
          while (!g_target_done.load() && waited < kAnswerWaitMs) {
            sleep_ms(1);
            ++waited;
          }
          if (!g_target_done.load()) {
            put("thread ");
            put_number(tid);
            put(": no answer within 500 ms (it blocks the signal or is stuck)\n");
          }
        }
        g_target.store(0);
      }
    }
    ::close(dir);
  }
  put(wire::kStackDumpEnd);
  put("\n");
  if (g_fd != 2) ::close(g_fd);
  g_fd = 2;
  g_dumper.store(0);
  errno = saved_errno;
}

}  // namespace

bool install_stack_dump() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(wire::kStackDumpSignal, nullptr, &current) != 0) return;
    const bool has_handler = (current.sa_flags & SA_SIGINFO) ? current.sa_sigaction != nullptr
                                                              : current.sa_handler != SIG_DFL;
    if (has_handler) return;  // the program's own: keep it
    const char* path = std::getenv(wire::kStackDumpFileVariable);
    if (path && *path && std::strlen(path) < sizeof(g_path)) {
      std::strcpy(g_path, path);
      g_has_path = true;
    }
    void* frames[2];
    ::backtrace(frames, 2);  // loads the unwinder now, not in the handler
    struct sigaction action {};
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    g_installed = ::sigaction(wire::kStackDumpSignal, &action, nullptr) == 0;
  });
  return g_installed;
}

}  // namespace rankwise::diag
