#pragma once
/// A Python pickle read into plain values, without running anything: what
/// DCP's `.metadata` (Python's pickle.dump, protocol 4 from Python 3.8 on)
/// and a torch.save record's `data.pkl` (protocol 2) hold. A GLOBAL is only
/// a name; REDUCE and NEWOBJ make an object that records the callable and
/// its arguments; BUILD records the state. Opcodes from Python's
/// Lib/pickletools.py (protocols 0-5, those these files use).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rankwise::checkpoint::pickle {

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

/// One value of an unpickled tree.
struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTuple, kList, kDict, kGlobal, kObject, kPersistentId };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  /// kString and kBytes: the text; kGlobal: "module.name" (e.g. "torch.float32").
  std::string text;
  /// kTuple and kList: the elements; kDict: key, value, key, value, ...;
  /// kPersistentId: the one persistent id.
  std::vector<PickleRef> items;
  /// kObject: the class or function called (a kGlobal) ...
  PickleRef callable;
  /// ... its arguments (a kTuple) ...
  PickleRef args;
  /// ... and what BUILD gave it (a dict, a tuple, or null).
  PickleRef state;
  /// Containers and objects: 1 + the deepest value inside (bounded by read_pickle).
  int depth = 0;

  /// For a kObject built with a dict state (a dataclass): the value of
  /// attribute `name`, or null when the state does not have it.
  PickleRef attribute(const std::string& name) const;
  /// kGlobal's name, else "".
  const std::string& global_name() const;
};

/// Reads `size` bytes of pickle. Throws CheckpointError naming `what` (e.g.
/// the file) when an opcode is unknown or the pickle is malformed
/// (truncated, stack underflow, unbalanced MARK, memo index not set, more or
/// fewer than one value at STOP, nesting deeper than 1000, more than 2^22
/// memo entries).
PickleRef read_pickle(const char* data, std::size_t size, const std::string& what);

}  // namespace rankwise::checkpoint::pickle
