#include "launch/output/tag_template.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <string_view>

#include "launch/options.h"

namespace rankwise::launch::output {

namespace {
constexpr std::array<std::string_view, 5> kFields = {"rank", "local_rank", "node_rank",
                                                     "world_size", "host"};

[[noreturn]] void bad_tag(const std::string& text, const std::string& what) {
  throw UsageError(fmt::format(
      "--tag '{}': {}; valid placeholders are {{rank}} {{local_rank}} {{node_rank}} "
      "{{world_size}} {{host}} (write {{{{ and }}}} for literal braces)",
      text, what));
}
}  // namespace

TagTemplate TagTemplate::parse(const std::string& text) {
  TagTemplate t;
  std::string literal;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{') {
      if (i + 1 < text.size() && text[i + 1] == '{') {
        literal += '{';
        ++i;
        continue;
      }
      const size_t close = text.find('}', i + 1);
      if (close == std::string::npos) bad_tag(text, fmt::format("unmatched '{{' at offset {}", i));
      const std::string name = text.substr(i + 1, close - i - 1);
      bool known = false;
      for (auto f : kFields) known = known || f == name;
      if (!known) bad_tag(text, fmt::format("unknown placeholder {{{}}}", name));
      if (!literal.empty()) t.pieces_.push_back({false, literal});
      literal.clear();
      t.pieces_.push_back({true, name});
      i = close;
    } else if (c == '}') {
      if (i + 1 < text.size() && text[i + 1] == '}') {
        literal += '}';
        ++i;
        continue;
      }
      bad_tag(text, fmt::format("unmatched '}}' at offset {}", i));
    } else {
      literal += c;
    }
  }
  if (!literal.empty()) t.pieces_.push_back({false, literal});
  return t;
}

std::string tag_from_torchrun_template(const std::string& text, const std::string& role) {
  const auto literal = [](const std::string& s) {
    std::string out;
    for (char c : s) out += (c == '{' || c == '}') ? std::string(2, c) : std::string(1, c);
    return out;
  };
  const auto macro = [&](const std::string& name) -> std::string {
    if (name == "rank" || name == "local_rank") return "{" + name + "}";
    if (name == "hostname") return "{host}";
    if (name == "role_name") return literal(role);
    return "";
  };
  const auto is_name_char = [](char c, bool first) {
    return c == '_' || std::isalpha(static_cast<unsigned char>(c)) ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
  };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += literal(text.substr(i, 1));
      continue;
    }
    if (text[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    std::string name;
    std::size_t end = i + 1;  // one past the macro
    if (text[i + 1] == '{') {
      const std::size_t close = text.find('}', i + 2);
      if (close != std::string::npos) {
        name = text.substr(i + 2, close - i - 2);
        end = close + 1;
      }
    } else {
      while (end < text.size() && is_name_char(text[end], end == i + 1)) ++end;
      name = text.substr(i + 1, end - i - 1);
    }
    const std::string replaced = name.empty() ? "" : macro(name);
    if (replaced.empty() && !(name == "role_name")) {
      out += '$';  // not a macro torchrun knows: kept as written
      continue;
    }
    out += replaced;
    i = end - 1;
  }
  return out;
}

std::string TagTemplate::render(const TagFields& f) const {
  std::string out;
  for (const auto& p : pieces_) {
    if (!p.is_field) {
      out += p.text;
    } else if (p.text == "rank") {
      out += fmt::format("{}", f.rank);
    } else if (p.text == "local_rank") {
      out += fmt::format("{}", f.local_rank);
    } else if (p.text == "node_rank") {
      out += fmt::format("{}", f.node_rank);
    } else if (p.text == "world_size") {
      out += fmt::format("{}", f.world_size);
    } else {
      out += f.host;
    }
  }
  return out;
}

}  // namespace rankwise::launch::output
