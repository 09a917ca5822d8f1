#include "checkpoint/torch_save/tensor_record.h"

#include "checkpoint/torch_save/dtype_names.h"
#include "checkpoint/pickle/pickle_value.h"
#include "checkpoint/torch_save/zip_directory.h"
#include "core/check.h"
#include "rankwise/error.h"

namespace rankwise::checkpoint::torch_save {
namespace {

class Parser {
 public:
  Parser(const RecordReader& read, int64_t length, const std::string& what)
      : read_(read), length_(length), what_(what) {}

  TensorRecord run() {
    dir_ = read_zip_directory(read_, length_, [this](const std::string& why) { bad(why); });

    const ZipEntry* pickle = nullptr;
    std::string prefix;
    for (const auto& e : dir_.entries) {
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

  int64_t data_begin(const ZipEntry& e) {
    return zip_entry_data_begin(read_, dir_, e, [this](const std::string& why) { bad(why); });
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
    const ZipEntry* storage = nullptr;
    for (const auto& e : dir_.entries) {
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
  ZipDirectory dir_;
};

}  // namespace

TensorRecord parse_tensor_record(const RecordReader& read, int64_t length, const std::string& what) {
  return Parser(read, length, what).run();
}

}  // namespace rankwise::checkpoint::torch_save
