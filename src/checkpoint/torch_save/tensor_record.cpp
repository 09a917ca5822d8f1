#include "checkpoint/torch_save/tensor_record.h"

#include "checkpoint/torch_save/dtype_names.h"
#include "checkpoint/pickle/pickle_value.h"
#include "checkpoint/torch_save/zip_format.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::torch_save {
namespace {

using namespace zip;

uint64_t le(const std::string& s, std::size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

struct Entry {
  std::string name;
  uint16_t method = 0;
  uint64_t size = 0;  // compressed size (= the stored size)
  uint64_t local_offset = 0;
};

class Parser {
 public:
  Parser(const RecordReader& read, int64_t length, const std::string& what)
      : read_(read), length_(length), what_(what) {}

  TensorRecord run() {
    if (length_ < kEndSize) bad("shorter than a zip's end record");
    const std::string end = get(length_ - kEndSize, kEndSize);
    if (le(end, 0, 4) != kEndOfDirectory) bad("no zip end record at its end");
    uint64_t count = le(end, 10, 2), dir_size = le(end, 12, 4), dir_offset = le(end, 16, 4);
    if (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
      if (length_ < kEndSize + kLocatorSize) bad("a zip64 record without its locator");
      const std::string locator = get(length_ - kEndSize - kLocatorSize, kLocatorSize);
      if (le(locator, 0, 4) != kZip64Locator) bad("a zip64 record without its locator");
      const uint64_t at = le(locator, 8, 8);
      if (at > static_cast<uint64_t>(length_ - kZip64EndSize)) bad("a zip64 end record outside it");
      const std::string end64 = get(static_cast<int64_t>(at), kZip64EndSize);
      if (le(end64, 0, 4) != kZip64End) bad("a damaged zip64 end record");
      count = le(end64, 32, 8);
      dir_size = le(end64, 40, 8);
      dir_offset = le(end64, 48, 8);
    }
    if (dir_offset > static_cast<uint64_t>(length_) || dir_size > static_cast<uint64_t>(length_) - dir_offset) {
      bad("a central directory outside it");
    }
    directory_begin_ = static_cast<int64_t>(dir_offset);
    entries_ = read_directory(get(directory_begin_, static_cast<int64_t>(dir_size)), count);

    const Entry* pickle = nullptr;
    std::string prefix;
    for (const auto& e : entries_) {
      const std::string suffix = "data.pkl";
      if (e.name.size() >= suffix.size() && e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
          e.name.find('/') == e.name.size() - suffix.size() - 1) {
        pickle = &e;
        prefix = e.name.substr(0, e.name.size() - suffix.size());
      }
    }
    if (pickle == nullptr) bad("no data.pkl entry");
    if (pickle->size > (uint64_t{1} << 20)) bad("a data.pkl larger than 1 MiB");
    const int64_t pickle_begin = data_begin(*pickle);
    const std::string pkl = get(pickle_begin, static_cast<int64_t>(pickle->size));
    return read_tensor(pickle::read_pickle(pkl.data(), pkl.size(), what_ + " (its data.pkl)"), prefix);
  }

 private:
  [[noreturn]] void bad(const std::string& why) {
    core::raise<CheckpointError>(
        "{} is not a tensor as torch.save writes it: {}. The file is damaged or was not written by "
        "torch.distributed.checkpoint",
        what_, why);
  }

  std::string get(int64_t offset, int64_t size) {
    if (offset < 0 || size < 0 || offset > length_ || size > length_ - offset) bad("a part lies outside it");
    return read_(offset, size);
  }

  std::vector<Entry> read_directory(const std::string& dir, uint64_t count) {
    std::vector<Entry> entries;
    std::size_t at = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if (at + 46 > dir.size() || le(dir, at, 4) != kCentralHeader) bad("a damaged central directory");
      Entry e;
      e.method = static_cast<uint16_t>(le(dir, at + 10, 2));
      e.size = le(dir, at + 20, 4);
      uint64_t uncompressed = le(dir, at + 24, 4);
      const std::size_t name_len = le(dir, at + 28, 2), extra_len = le(dir, at + 30, 2),
                        comment_len = le(dir, at + 32, 2);
      e.local_offset = le(dir, at + 42, 4);
      if (at + 46 + name_len + extra_len + comment_len > dir.size()) bad("a damaged central directory");
      e.name = dir.substr(at + 46, name_len);
      // Zip64 extra field (id 1): the 8-byte values of the fields set to 0xffffffff, in this order.
      std::size_t x = at + 46 + name_len;
      const std::size_t x_end = x + extra_len;
      while (x + 4 <= x_end) {
        const uint64_t id = le(dir, x, 2), n = le(dir, x + 2, 2);
        if (x + 4 + n > x_end) bad("a damaged zip extra field");
        if (id == 1) {
          std::size_t f = x + 4;
          auto take = [&](uint64_t& field) {
            if (field != 0xffffffff) return;
            if (f + 8 > x + 4 + n) bad("a damaged zip64 extra field");
            field = le(dir, f, 8);
            f += 8;
          };
          take(uncompressed);
          take(e.size);
          take(e.local_offset);
        }
        x += 4 + n;
      }
      entries.push_back(std::move(e));
      at += 46 + name_len + extra_len + comment_len;
    }
    return entries;
  }

  // The first byte of an entry's data, after its local header; checks that
  // the entry is stored (not compressed) and ends before the directory.
  int64_t data_begin(const Entry& e) {
    if (e.method != 0) bad("entry '" + e.name + "' is compressed");
    if (e.local_offset > static_cast<uint64_t>(directory_begin_)) bad("entry '" + e.name + "' lies outside it");
    const std::string header = get(static_cast<int64_t>(e.local_offset), 30);
    if (le(header, 0, 4) != kLocalHeader) bad("entry '" + e.name + "' has no local header");
    const int64_t begin = static_cast<int64_t>(e.local_offset) + 30 + static_cast<int64_t>(le(header, 26, 2)) +
                          static_cast<int64_t>(le(header, 28, 2));
    if (begin > directory_begin_ || e.size > static_cast<uint64_t>(directory_begin_ - begin)) {
      bad("entry '" + e.name + "' reaches into the central directory");
    }
    return begin;
  }

  std::vector<int64_t> ints(const pickle::PickleRef& v, const char* what) {
    if (!v || v->kind != pickle::PickleValue::Kind::kTuple) bad(std::string("its ") + what + " is not a tuple");
    std::vector<int64_t> out;
    for (const auto& i : v->items) {
      if (i->kind != pickle::PickleValue::Kind::kInt || i->integer < 0) bad(std::string("its ") + what + " holds a negative or non-integer value");
      out.push_back(i->integer);
    }
    return out;
  }

  TensorRecord read_tensor(const pickle::PickleRef& root, const std::string& prefix) {
    if (!root || root->kind != pickle::PickleValue::Kind::kObject || !root->callable ||
        root->callable->global_name() != "torch._utils._rebuild_tensor_v2" || root->args->items.size() < 4) {
      bad("data.pkl is not one tensor (torch._utils._rebuild_tensor_v2)");
    }
    const auto& args = root->args->items;
    const auto& pid = args[0];
    if (pid->kind != pickle::PickleValue::Kind::kPersistentId || pid->items.size() != 1 ||
        pid->items[0]->kind != pickle::PickleValue::Kind::kTuple || pid->items[0]->items.size() != 5) {
      bad("its storage is not a persistent id ('storage', type, key, location, numel)");
    }
    const auto& id = pid->items[0]->items;
    const std::string storage_type = id[1]->global_name();
    const DtypeNames* names =
        storage_type.rfind("torch.", 0) == 0 ? dtype_names(storage_type.substr(6), true) : nullptr;
    if (names == nullptr) bad("its storage type '" + storage_type + "' is not one rankwise reads");
    if (id[2]->kind != pickle::PickleValue::Kind::kString || id[4]->kind != pickle::PickleValue::Kind::kInt || id[4]->integer < 0) {
      bad("its storage id is malformed");
    }
    if (args[1]->kind != pickle::PickleValue::Kind::kInt || args[1]->integer < 0) bad("its storage offset is not an integer");
    TensorRecord r;
    r.dtype = names->type;
    r.storage_offset = args[1]->integer;
    r.sizes = ints(args[2], "size");
    r.strides = ints(args[3], "stride");
    if (r.sizes.size() != r.strides.size()) bad("its size and stride differ in length");
    const int64_t element = static_cast<int64_t>(c10::elementSize(r.dtype));
    const int64_t numel = id[4]->integer;
    const std::string storage_name = prefix + "data/" + id[2]->text;
    const Entry* storage = nullptr;
    for (const auto& e : entries_) {
      if (e.name == storage_name) storage = &e;
    }
    if (storage == nullptr) bad("no entry '" + storage_name + "' for its storage");
    r.data_begin = data_begin(*storage);
    r.data_size = static_cast<int64_t>(storage->size);
    if (numel > r.data_size / element) bad("its storage entry is shorter than the storage");
    if (r.storage_offset > numel) bad("its storage offset lies past its storage");
    // The last element the tensor reaches must lie inside the storage.
    bool empty = false;
    int64_t last = r.storage_offset;
    for (std::size_t d = 0; d < r.sizes.size(); ++d) {
      if (r.sizes[d] == 0) empty = true;
      if (r.sizes[d] > 0 && r.strides[d] > (int64_t{1} << 48) / r.sizes[d]) bad("its strides are too large");
      last += (r.sizes[d] - 1) * r.strides[d];
    }
    if (!empty && last >= numel) bad("its elements reach past its storage");
    return r;
  }

  const RecordReader& read_;
  int64_t length_;
  const std::string& what_;
  int64_t directory_begin_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace

TensorRecord parse_tensor_record(const RecordReader& read, int64_t length, const std::string& what) {
  return Parser(read, length, what).run();
}

}  // namespace rankwise::checkpoint::torch_save
