#pragma once
// Shared by the harnesses: the input as a file (for readers that take a
// path), the rule "a rankwise::Error is a clean rejection, anything else is a
// finding", and a walk that touches every byte range a loaded value claims.
#include <ATen/core/ivalue.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rankwise/error.h"

namespace rankwise_fuzz {

// An anonymous in-memory file (memfd) that holds the current input; readers
// open it by path, /proc/self/fd/N.
class InputFile {
 public:
  explicit InputFile(const char* name) : fd_(::memfd_create(name, 0)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  void write(const void* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    const char* p = static_cast<const char*>(data);
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::pwrite(fd_, p + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// Runs f; a rankwise::Error is a clean rejection of bad input, any other
// exception escaping rankwise is reported as a crash.
template <typename F>
void only_rankwise_errors(const char* what, F&& f) {
  try {
    f();
  } catch (const rankwise::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw a non-rankwise exception: %s\n", what, e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s threw a non-std::exception\n", what);
    std::abort();
  }
}

// Reads the first and last byte of the memory a tensor claims, in
// instrumented code, so ASan reports a tensor that extends past its storage.
inline void touch_tensor(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !t.has_storage()) return;
  int64_t low = 0, high = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t extent = (t.size(d) - 1) * t.stride(d);
    (extent < 0 ? low : high) += extent;
  }
  const auto* base = static_cast<const volatile unsigned char*>(t.storage().data());
  const int64_t item = static_cast<int64_t>(t.element_size());
  (void)base[(t.storage_offset() + low) * item];
  (void)base[(t.storage_offset() + high) * item + item - 1];
}

inline void touch(const c10::IValue& v, int depth = 0) {
  if (depth > 200) return;
  if (v.isTensor()) {
    touch_tensor(v.toTensor());
  } else if (v.isString()) {
    const std::string& s = v.toStringRef();
    if (!s.empty()) (void)static_cast<const volatile char&>(s.back());
  } else if (v.isGenericDict()) {
    for (const auto& e : v.toGenericDict()) {
      touch(e.key(), depth + 1);
      touch(e.value(), depth + 1);
    }
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) touch(e, depth + 1);
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) touch(e, depth + 1);
  }
}

}  // namespace rankwise_fuzz
