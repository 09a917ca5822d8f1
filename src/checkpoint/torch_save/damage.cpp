#include "checkpoint/torch_save/damage.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "checkpoint/pickle/pickle_value.h"
#include "checkpoint/torch_save/checkpoint_file.h"
#include "checkpoint/torch_save/zip_directory.h"
#include "checkpoint/torch_save/zip_format.h"
#include "core/check.h"
#include "rankwise/error.h"
#include "util/crc32.h"

namespace rankwise::checkpoint::torch_save {
namespace {

// What read_zip_directory's `bad` throws here: a damaged structure, said as one line.
struct Damaged : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void bad(const std::string& why) { throw Damaged(why); }

class File {
 public:
  explicit File(const std::string& path) : in_(path, std::ios::binary) {
    RANKWISE_CHECK(in_.good(), CheckpointError, "cannot open checkpoint '{}' to locate its damage", path);
    size_ = static_cast<int64_t>(std::filesystem::file_size(path));
  }
  int64_t size() const { return size_; }
  std::string read(int64_t offset, int64_t n) {
    std::string out(static_cast<std::size_t>(n), '\0');
    in_.seekg(offset);
    in_.read(out.data(), n);
    if (in_.gcount() != n) bad(fmt::format("{} bytes at {} lie past its end", n, offset));
    return out;
  }
  uint32_t crc_of(int64_t offset, uint64_t n) {
    uint32_t crc = 0;
    for (uint64_t done = 0; done < n;) {
      const int64_t piece = static_cast<int64_t>(std::min<uint64_t>(n - done, uint64_t{4} << 20));
      const std::string bytes = read(offset + static_cast<int64_t>(done), piece);
      crc = util::crc32_update(crc, bytes.data(), bytes.size());
      done += static_cast<uint64_t>(piece);
    }
    return crc;
  }

 private:
  std::ifstream in_;
  int64_t size_ = 0;
};

// Storage key (the NNN of archive/data/NNN) -> the keys of the tensors on it.
using StorageKeys = std::map<std::string, std::vector<std::string>>;

void collect(const pickle::PickleRef& v, const std::string& path, StorageKeys& out, int depth = 0) {
  if (!v || depth > 1000) return;
  using Kind = pickle::PickleValue::Kind;
  if (v->kind == Kind::kPersistentId && !v->items.empty() && v->items[0] &&
      v->items[0]->items.size() >= 3 && v->items[0]->items[2]->kind == Kind::kString) {
    auto& keys = out[v->items[0]->items[2]->text];
    if (keys.empty() || keys.back() != path) keys.push_back(path);
    return;
  }
  if (v->kind == Kind::kDict) {
    for (std::size_t i = 0; i + 1 < v->items.size(); i += 2) {
      const auto& key = v->items[i];
      // String keys, and integer ones (the optimizer's state by parameter index), as inspect names them.
      std::string name;
      if (key && key->kind == Kind::kString) name = key->text;
      if (key && key->kind == Kind::kInt) name = std::to_string(key->integer);
      collect(v->items[i + 1], name.empty() ? path : (path.empty() ? name : path + "." + name), out, depth + 1);
    }
    return;
  }
  for (const auto& item : v->items) collect(item, path, out, depth + 1);
  for (const auto& part : {v->args, v->state}) collect(part, path, out, depth + 1);
}

// "data/3" of "archive/data/3" -> " (the storage of 'a', 'b')", else "".
std::string whose(const StorageKeys& keys, const std::string& entry) {
  const auto slash = entry.rfind("/data/");
  if (slash == std::string::npos) return entry.size() >= 8 && entry.substr(entry.size() - 8) == "data.pkl"
                                             ? " (the pickle: every key, shape and dtype)"
                                             : "";
  const auto found = keys.find(entry.substr(slash + 6));
  if (found == keys.end()) return " (a storage)";
  std::string names;
  for (const auto& k : found->second) names += (names.empty() ? "'" : ", '") + k + "'";
  return " (the storage of " + names + ")";
}

// What check_entry found: nothing (`line` empty), a damaged header or
// record (`line` says which), or damaged bytes (`bytes_damaged`, `line` the
// CRC-32s, to follow the entry's name and keys).
struct EntryCheck {
  std::string line;
  bool bytes_damaged = false;
};

// Whether the local header of `e` agrees with the directory: its name, and
// extra fields that fill exactly the length it gives them.
bool local_header_agrees(File& f, const ZipEntry& e) {
  const int64_t at = static_cast<int64_t>(e.local_offset);
  const std::string fixed = f.read(at, zip::kLocalHeaderSize);
  const uint64_t name_len = zip::le(fixed, 26, 2), extra_len = zip::le(fixed, 28, 2);
  if (name_len != e.name.size() || zip::le(fixed, 8, 2) != e.method) return false;
  const std::string rest = f.read(at + zip::kLocalHeaderSize, static_cast<int64_t>(name_len + extra_len));
  if (rest.compare(0, name_len, e.name) != 0) return false;
  std::size_t x = name_len;
  while (x + 4 <= rest.size()) x += 4 + zip::le(rest, x + 2, 2);
  return x == rest.size();
}

// Checks one entry's local header, bytes and data descriptor against the
// directory; blames the bytes only when everything that locates them agrees.
EntryCheck check_entry(File& f, const ZipDirectory& dir, const ZipEntry& e) {
  const RecordReader read = [&](int64_t at, int64_t n) { return f.read(at, n); };
  const int64_t begin = zip_entry_data_begin(read, dir, e, bad);
  if (!local_header_agrees(f, e)) return {fmt::format("entry '{}': its local header", e.name)};
  const std::string descriptor = f.read(begin + static_cast<int64_t>(e.size), 12);
  if (zip::le(descriptor, 0, 4) != zip::kDataDescriptor || zip::le(descriptor, 8, 4) != (e.size & zip::kMax32)) {
    return {fmt::format("entry '{}': its size in the central directory, or its data descriptor", e.name)};
  }
  const uint32_t crc = f.crc_of(begin, e.size);
  const uint32_t recorded = static_cast<uint32_t>(zip::le(descriptor, 4, 4));
  if (crc == e.crc32 && recorded == crc) return {};
  if (crc == e.crc32) return {fmt::format("entry '{}': its data descriptor (its bytes are intact)", e.name)};
  if (recorded == crc) {
    return {fmt::format("entry '{}': its record in the central directory (its bytes are intact)", e.name)};
  }
  return {fmt::format(": its bytes' CRC-32 is {:08x}, the zip records {:08x}", crc, e.crc32), true};
}

std::vector<std::string> locate(File& f, int64_t trailer_size) {
  const int64_t zip_length = f.size() - trailer_size;
  const RecordReader read = [&](int64_t at, int64_t n) { return f.read(at, n); };
  const ZipDirectory dir = read_zip_directory(read, zip_length, bad);
  StorageKeys keys;
  std::vector<std::pair<const ZipEntry*, EntryCheck>> found;
  for (const auto& e : dir.entries) {
    EntryCheck c = check_entry(f, dir, e);
    const bool pickle = e.name.size() >= 8 && e.name.substr(e.name.size() - 8) == "data.pkl";
    if (pickle && !c.bytes_damaged && e.size <= (uint64_t{64} << 20)) {
      const std::string pkl = f.read(zip_entry_data_begin(read, dir, e, bad), static_cast<int64_t>(e.size));
      try {
        collect(pickle::read_pickle(pkl.data(), pkl.size(), e.name), "", keys);
      } catch (const CheckpointError&) {
      }
    }
    if (!c.line.empty()) found.emplace_back(&e, std::move(c));
  }
  std::vector<std::string> lines;
  for (const auto& [e, c] : found) {
    lines.push_back(c.bytes_damaged ? "entry '" + e->name + "'" + whose(keys, e->name) + c.line : c.line);
  }
  if (lines.empty()) {
    lines.push_back("outside every entry's bytes (zip padding, header fields, the end records or the recorded "
                    "CRC-32 itself): no key's bytes changed");
  }
  return lines;
}

}  // namespace

std::vector<std::string> locate_damage(const std::string& path) {
  File f(path);
  try {
    return locate(f, checksum_record_size(path));
  } catch (const Damaged& d) {
    return {fmt::format("the zip's structure: {}", d.what())};
  }
}

}  // namespace rankwise::checkpoint::torch_save
