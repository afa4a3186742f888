#pragma once
// The string forms of an enum's values, as one table (STYLE.md 5: the names scenario files,
// the CLI and the GUI menus share). Each enum with names declares its table once, next to
// the enum's own functions (tier.cpp, families.cpp, ...):
//
//   constexpr auto kRateKinds = enum_table<RateKind>("rate kind", {{RateKind::Code, "code"},
//                                                                   {RateKind::Total, "total"}});
//   std::string_view to_string(RateKind k) { return enum_name(kRateKinds, k); }
//   RateKind parse_rate_kind(std::string_view s) { return parse_enum(kRateKinds, s); }
//
// parse_enum's InputError names the value, the kind and the choices, in table order:
//   "rate kind 'bits' is not valid; the choices are code, total."
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "model/base/error.hpp"

namespace tierlab {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

template <class E, std::size_t N>
struct EnumTable {
  std::string_view kind;  // what the names name, for messages: "rate kind"
  std::array<EnumName<E>, N> names;
};

// A table from its rows: enum_table<E>("kind", {{E::A, "a"}, {E::B, "b"}}).
template <class E, std::size_t N>
constexpr EnumTable<E, N> enum_table(std::string_view kind, const EnumName<E> (&rows)[N]) {
  EnumTable<E, N> t{kind, {}};
  for (std::size_t i = 0; i < N; ++i) t.names[i] = rows[i];
  return t;
}

// The name of v ("unknown" for a value the table lacks).
template <class E, std::size_t N>
constexpr std::string_view enum_name(const EnumTable<E, N>& t, E v) {
  for (const auto& row : t.names)
    if (row.value == v) return row.name;
  return "unknown";
}

// The value named `text`, or nothing.
template <class E, std::size_t N>
constexpr std::optional<E> find_enum(const EnumTable<E, N>& t, std::string_view text) {
  for (const auto& row : t.names)
    if (row.name == text) return row.value;
  return std::nullopt;
}

// The names in table order, joined by ", ": "code, total".
template <class E, std::size_t N>
std::string enum_choices(const EnumTable<E, N>& t) {
  std::string s;
  for (std::size_t i = 0; i < N; ++i) (s += i ? ", " : "") += t.names[i].name;
  return s;
}

// "<what> '<text>' is not valid; the choices are <choices>."
inline std::string invalid_choice_message(std::string_view what, std::string_view text, const std::string& choices) {
  return std::string(what) + " '" + std::string(text) + "' is not valid; the choices are " + choices + ".";
}

// The value named `text`; otherwise InputError naming it as a `what` (default: the table's
// kind) and listing the choices.
template <class E, std::size_t N>
E parse_enum(const EnumTable<E, N>& t, std::string_view text, std::string_view what = {}) {
  if (const auto v = find_enum(t, text)) return *v;
  throw InputError(invalid_choice_message(what.empty() ? t.kind : what, text, enum_choices(t)));
}

}  // namespace tierlab
