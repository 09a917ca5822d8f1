#pragma once
/// \file tag_template.h
/// The tag prepended to every line a worker writes, e.g. `[rank{rank}]: `.

#include <string>
#include <vector>

namespace rankwise::launch::output {

/// Values a tag may name.
struct TagFields {
  int rank = 0;        ///< {rank}: global rank
  int local_rank = 0;  ///< {local_rank}: rank on this node
  int node_rank = 0;   ///< {node_rank}: index of this node
  int world_size = 1;  ///< {world_size}: number of processes in the job
  std::string host;    ///< {host}: this node's host name
};

/// A parsed tag template. Placeholders: {rank} {local_rank} {node_rank}
/// {world_size} {host}; `{{` and `}}` stand for literal braces.
class TagTemplate {
 public:
  /// Parses `text`. Throws UsageError naming --tag, the bad placeholder and the
  /// valid ones when `text` has an unknown placeholder or an unmatched brace.
  static TagTemplate parse(const std::string& text);

  /// The tag for one worker.
  std::string render(const TagFields& fields) const;

 private:
  struct Piece {
    bool is_field;
    std::string text;  // literal text, or the field name
  };
  std::vector<Piece> pieces_;
};

/// torchrun's --log-line-prefix-template `text` (Python string.Template
/// syntax: $name or ${name}, $$ for '$'; its macros ${rank} ${local_rank}
/// ${hostname} ${role_name}) as a --tag template: the first three become
/// {rank} {local_rank} {host}, ${role_name} becomes `role`, braces are
/// doubled, and anything else stays as written (as torchrun leaves unknown
/// names). Never throws.
std::string tag_from_torchrun_template(const std::string& text, const std::string& role);

}  // namespace rankwise::launch::output
