// launch_probe: a tiny worker program for the launcher tests (plain C++, links
// nothing). Usage: launch_probe MODE [ARGS...]; RANK etc. come from rankwise-run.
//
//   spam LINES LEN        LINES lines of LEN bytes via write(2), every odd line in
//                         three pieces with short sleeps (see spam_line())
//   fail RANK CODE DIR    every rank writes DIR/pid_<rank>; RANK writes 12 stderr
//                         lines and exits CODE after 300 ms; the others sleep
//   hang DIR              write DIR/pid_<rank>, then sleep; on SIGINT write
//                         DIR/sigint_<rank> and exit 130
//   errorfile TEXT        rank 1 writes TEXT to $RANKWISE_ERROR_FILE, exits 1
//   restart               rank 1 exits 3 on attempt 0; every rank then prints
//                         "ok on attempt N"; `restart always`: rank 1 always fails
//   nonewline             "no newline here" without '\n'
//   longline BYTES        one line of BYTES pattern bytes, in 4 KiB writes
//   progress              a carriage-return progress bar, then "done"
//   lines N               "rank R line k" N times with sleeps, and "rank R err" on stderr
//   env                   the launch variables, one NAME=value per line
//   sched                 starts a thread, then prints "sched <policy>" for every
//                         thread, read from /proc/self/task/*/stat (field 41)
//   echo ARGS...          each argument on its own line
//   split                 "out R" on stdout, "err R" on stderr
//   bytes                 a line with invalid UTF-8
//   flood LINES LEN       LINES lines of LEN bytes, one write(2) each, no sleeps
//                         (throughput benchmark; stdout may be a file or the launcher)
//   hog                   rank 1 touches 16 MiB more every 10 ms until the kernel
//                         kills it (exit 98 past 16 GiB); the others sleep
//   paced RATE SECONDS    RATE lines per second of ~80 bytes for SECONDS, one
//                         write(2) each, at even steps (launcher CPU benchmark)
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

void put(int fd, const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(99);
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) _exit(98);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());  // readers never see a partial file
}

void sleep_ms(int ms) { ::usleep(static_cast<useconds_t>(ms) * 1000); }

void sleep_forever() {
  for (int i = 0; i < 600; ++i) sleep_ms(100);
  _exit(42);  // tests never wait this long
}

std::string g_dir;
int g_rank = -1;

extern "C" void on_sigint(int) {
  const std::string path = g_dir + "/sigint_" + std::to_string(g_rank);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) ::close(fd);
  _exit(130);
}

}  // namespace

/// The body of line `i` of rank `rank` in `spam` mode (the tests rebuild it).
std::string spam_line(int rank, int i, int len) {
  std::string s = "rank=" + std::to_string(rank) + " line=" + std::to_string(i) + " ";
  while (static_cast<int>(s.size()) < len) s += static_cast<char>('a' + (i + s.size()) % 26);
  s.resize(static_cast<size_t>(len));
  return s;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  const int rank = env_int("RANK");
  g_rank = rank;

  if (mode == "spam" && argc == 4) {
    const int lines = std::atoi(argv[2]), len = std::atoi(argv[3]);
    for (int i = 0; i < lines; ++i) {
      const std::string line = spam_line(rank, i, len) + "\n";
      if (i % 2 == 0) {
        put(1, line);
      } else {
        const size_t a = line.size() / 3, b = 2 * line.size() / 3;
        put(1, line.substr(0, a));
        ::usleep(50);
        put(1, line.substr(a, b - a));
        ::usleep(50);
        put(1, line.substr(b));
      }
    }
    return 0;
  }
  if (mode == "fail" && argc == 5) {
    const int fail_rank = std::atoi(argv[2]), code = std::atoi(argv[3]);
    write_file(std::string(argv[4]) + "/pid_" + std::to_string(rank), std::to_string(::getpid()));
    if (rank != fail_rank) sleep_forever();
    for (int k = 0; k < 12; ++k) put(2, "error line " + std::to_string(k) + "\n");
    sleep_ms(300);
    return code;
  }
  if (mode == "hang" && argc == 3) {
    g_dir = argv[2];
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    ::sigaction(SIGINT, &sa, nullptr);
    write_file(g_dir + "/pid_" + std::to_string(rank), std::to_string(::getpid()));
    put(1, "ready\n");
    sleep_forever();
  }
  if (mode == "hog") {
    if (rank != 1) sleep_forever();
    for (int mib = 0; mib < 16384; mib += 16) {
      auto* block = static_cast<char*>(std::malloc(16 << 20));
      if (block == nullptr) return 97;
      std::memset(block, 1, 16 << 20);
      sleep_ms(10);
    }
    return 98;
  }
  if (mode == "errorfile" && argc == 3) {
    if (rank != 1) sleep_forever();
    const char* path = std::getenv("RANKWISE_ERROR_FILE");
    if (!path) return 97;
    write_file(path, argv[2]);
    return 1;
  }
  if (mode == "restart") {
    const int attempt = env_int("RANKWISE_RESTART_COUNT");
    const bool always = argc == 3 && std::string(argv[2]) == "always";
    if (rank == 1 && (attempt == 0 || always)) {
      put(2, "failing on attempt " + std::to_string(attempt) + "\n");
      return 3;
    }
    if (rank != 1 && (attempt == 0 || always)) sleep_forever();  // stopped by the launcher
    put(1, "ok on attempt " + std::to_string(attempt) + "\n");
    return 0;
  }
  if (mode == "nonewline") {
    put(1, "no newline");
    sleep_ms(50);
    put(1, " here");
    return 0;
  }
  if (mode == "longline" && argc == 3) {
    const int bytes = std::atoi(argv[2]);
    std::string line;
    for (int i = 0; i < bytes; ++i) line += static_cast<char>('a' + i % 26);
    for (int off = 0; off < bytes; off += 4096) put(1, line.substr(off, 4096));
    put(1, "\n");
    return 0;
  }
  if (mode == "progress") {
    for (int i = 1; i <= 5; ++i) {
      put(1, "\rstep " + std::to_string(i) + "/5");
      sleep_ms(10);
    }
    put(1, "\ndone\n");
    return 0;
  }
  if (mode == "lines" && argc == 3) {
    const int n = std::atoi(argv[2]);
    for (int k = 0; k < n; ++k) {
      put(1, "rank " + std::to_string(rank) + " line " + std::to_string(k) + "\n");
      sleep_ms(20);
    }
    put(2, "rank " + std::to_string(rank) + " err\n");
    return 0;
  }
  if (mode == "env") {
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
          "MASTER_PORT", "RANKWISE_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT",
          "RANKWISE_AGENT_STORE", "TORCHELASTIC_RUN_ID", "RANKWISE_ERROR_FILE", "OMP_NUM_THREADS",
          "RANKWISE_STDOUT_IS_TTY"}) {
      const char* v = std::getenv(name);
      put(1, std::string(name) + "=" + (v ? v : "<unset>") + "\n");
    }
    return 0;
  }
  if (mode == "sched") {
    std::thread other([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
    DIR* tasks = ::opendir("/proc/self/task");
    while (dirent* entry = tasks ? ::readdir(tasks) : nullptr) {
      if (entry->d_name[0] == '.') continue;
      std::FILE* f = std::fopen(("/proc/self/task/" + std::string(entry->d_name) + "/stat").c_str(), "r");
      char stat[4096] = {};
      const std::size_t n = f ? std::fread(stat, 1, sizeof stat - 1, f) : 0;
      if (f) std::fclose(f);
      // Fields after the command name "(...)", which may hold spaces: state is 3, policy 41.
      const char* p = std::strrchr(stat, ')');
      int field = 2, policy = -1;
      for (; p && *p && static_cast<std::size_t>(p - stat) < n; ++p) {
        if (*p == ' ' && ++field == 41) {
          policy = std::atoi(p + 1);
          break;
        }
      }
      const char* names[] = {"normal", "fifo", "rr", "batch", "iso", "idle"};
      put(1, std::string("sched ") + (policy >= 0 && policy <= 5 ? names[policy] : "?") + "\n");
    }
    if (tasks) ::closedir(tasks);
    other.join();
    return 0;
  }
  if (mode == "echo") {
    for (int i = 2; i < argc; ++i) put(1, std::string(argv[i]) + "\n");
    return 0;
  }
  if (mode == "split") {
    put(1, "out " + std::to_string(rank) + "\n");
    put(2, "err " + std::to_string(rank) + "\n");
    return 0;
  }
  if (mode == "bytes") {
    put(1, std::string("bad \xff\xfe utf8 \xc3\n"));
    return 0;
  }
  if (mode == "flood" && argc == 4) {
    const int lines = std::atoi(argv[2]), len = std::atoi(argv[3]);
    std::string line = "rank=" + std::to_string(rank) + " ";
    line.resize(static_cast<size_t>(len > 1 ? len - 1 : 0), 'x');
    line += '\n';
    for (int i = 0; i < lines; ++i) put(1, line);
    return 0;
  }
  if (mode == "paced" && argc == 4) {
    const double rate = std::atof(argv[2]), seconds = std::atof(argv[3]);
    const long total = static_cast<long>(rate * seconds);
    const auto step = std::chrono::duration<double>(1.0 / rate);
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < total; ++i) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(step * i));
      std::string line = "rank " + std::to_string(rank) + " step " + std::to_string(i) +
                         " loss 0.123456 acc 0.987654 lr 0.001000 throughput 12345.6 samples/s\n";
      put(1, line);
    }
    return 0;
  }
  put(2, "launch_probe: unknown mode or arguments\n");
  return 2;
}
