#pragma once
/// A Python pickle (protocol 2) written opcode by opcode, for files Python
/// reads with pickle.load (DCP's `.metadata`). Opcodes as Python's
/// Lib/pickletools.py documents them; no memo (Python reads a pickle
/// without one).
#include <cstdint>
#include <string>

namespace rankwise::checkpoint::pickle {

class PickleWriter {
 public:
  /// Starts with PROTO 2.
  PickleWriter();
  void none();
  void boolean(bool value);
  /// BININT1/BININT2/BININT, or LONG1 beyond 32 bits.
  void integer(int64_t value);
  /// A str (BINUNICODE; `value` is UTF-8).
  void string(const std::string& value);
  /// GLOBAL "module\nname\n": the object `module.name`.
  void global(const std::string& module, const std::string& name);
  void mark();
  /// TUPLE of everything since the last mark().
  void tuple();
  void empty_tuple();
  void empty_list();
  void empty_dict();
  /// APPENDS / SETITEMS of everything since the last mark() to the list / dict below it.
  void appends();
  void set_items();
  /// REDUCE (callable, args), NEWOBJ (cls, args), BUILD (object, state).
  void reduce();
  void new_object();
  void build();
  /// BINPERSID: the object below becomes a persistent id (torch.save's storage reference).
  void persistent_id();
  /// STOP; the pickle's bytes.
  std::string finish();

 private:
  std::string out_;
};

}  // namespace rankwise::checkpoint::pickle
