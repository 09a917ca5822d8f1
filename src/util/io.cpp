#include "util/io.h"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <system_error>

namespace rankwise::util {

bool write_all(int fd, std::string_view text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

void write_text(int fd, std::string_view text) { (void)write_all(fd, text); }

void write_line(int fd, const std::string& line) { write_text(fd, line + "\n"); }

bool hit_file_size_limit(int error) {
  rlimit limit{};
  return error == EFBIG && ::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
}

std::string write_error_text(int error) {
  if (!hit_file_size_limit(error)) return std::strerror(error);
  rlimit limit{};
  ::getrlimit(RLIMIT_FSIZE, &limit);
  return fmt::format("{}: the file reached this process's file size limit (RLIMIT_FSIZE) of {} bytes "
                     "(`ulimit -f` {}); raise it, e.g. `ulimit -f unlimited` in the shell that starts the job",
                     std::strerror(error), limit.rlim_cur, limit.rlim_cur / 1024);
}

void ignore_file_size_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGXFSZ, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGXFSZ, &ignore, nullptr);
  });
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = ::opendir(dir.c_str());
  if (!handle) return names;
  while (const dirent* entry = ::readdir(handle)) names.emplace_back(entry->d_name);
  ::closedir(handle);
  return names;
}

std::size_t pread_all(int fd, void* buffer, std::size_t size, uint64_t offset) {
  auto* out = static_cast<char*>(buffer);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category());
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

bool write_then_rename(const std::string& path, const std::string& text) {
  ignore_file_size_signal();
  const std::string part = path + ".part";
  {
    std::ofstream out(part, std::ios::trunc);
    out << text;
    if (!out.flush()) return false;
  }
  return std::rename(part.c_str(), path.c_str()) == 0;
}

}  // namespace rankwise::util
