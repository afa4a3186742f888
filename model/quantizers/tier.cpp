// Tiers, their names and nominal rates, and the rate ladder (tier.hpp).
#include "model/quantizers/tier.hpp"

#include <charconv>
#include <cstdio>
#include <string>

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/tier_quantizer.hpp"

namespace tierlab {

namespace {

// Parses a non-empty run of decimal digits at the front of `s`; advances `s`.
bool take_int(std::string_view& s, int& out) {
  const char* first = s.data();
  const char* last = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  if (ec != std::errc() || ptr == first) return false;
  s.remove_prefix(static_cast<std::size_t>(ptr - first));
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_tier_name(std::string_view name) {
  throw InputError("Tier name '" + std::string(name) + "' is not valid; valid forms are " + tier_forms_list() + ".");
}

// The registry row of a tier, or null (name() must not throw: it builds messages).
const TierForm* find_form(const Tier& t) {
  for (const TierForm& f : tier_forms())
    if (f.kind == t.kind && (t.kind != QuantizerKind::Published || f.prefix == t.method)) return &f;
  return nullptr;
}

}  // namespace

// Checks one tier on its own (bits and group in the range of its form); `where` names it.
void Tier::validate(const std::string& where) const {
  const TierForm* f = find_form(*this);
  if (!f)
    throw InputError(where + " has quantizer '" + (method.empty() ? std::string(to_string(kind)) : method) +
                     "', which is no tier form; valid forms are " + tier_forms_list() + ".");
  if (!f->has_bits) {
    if (bits != f->min_bits)
      throw InputError(where + " is " + f->prefix + " but has bits = " + std::to_string(bits) + " (must be " +
                       std::to_string(f->min_bits) + ").");
    return;
  }
  if (bits < f->min_bits || bits > f->max_bits)
    throw InputError(where + " has bits = " + std::to_string(bits) + "; a " + f->prefix + " tier needs " +
                     std::to_string(f->min_bits) + " <= bits <= " + std::to_string(f->max_bits) + ".");
  if (group < 0)
    throw InputError(where + " has group = " + std::to_string(group) + "; the group size must be >= 0 (0 = default).");
  if (!f->has_group && group != 0)
    throw InputError(where + " has group = " + std::to_string(group) + "; the form " + f->form + " takes no group.");
}

// The kinds a tier names by kind alone; Published is named by its method (Tier::method).
constexpr auto kQuantizerKinds = enum_table<QuantizerKind>("quantizer kind", {{QuantizerKind::Evict, "evict"},
                                                                              {QuantizerKind::Exact, "exact"},
                                                                              {QuantizerKind::KiviPerChannel, "kivi"},
                                                                              {QuantizerKind::PerToken, "token"}});
constexpr auto kRateKinds = enum_table<RateKind>("rate kind", {{RateKind::Code, "code"}, {RateKind::Total, "total"}});

std::string_view to_string(QuantizerKind k) {
  return k == QuantizerKind::Published ? "published" : enum_name(kQuantizerKinds, k);
}

QuantizerKind parse_quantizer_kind(std::string_view s) { return parse_enum(kQuantizerKinds, s); }

std::string_view to_string(RateKind k) { return enum_name(kRateKinds, k); }

RateKind parse_rate_kind(std::string_view s) { return parse_enum(kRateKinds, s); }

std::string measured_rate_legend() {
  return "rates in bits per key element, measured on the materialised keys: code = the code bits; total = code bits "
         "+ the metadata this allocation forms (scales, zero points, partial groups)";
}

std::string budget_rate_legend(RateKind budget_kind, double budget) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", budget);
  const std::string B = b;
  if (budget_kind == RateKind::Total)
    return "nominal = the total rate the solver counted against B = " + B +
           " (every tier's dense rate, partial groups not counted); B holds the measured total: where the groups "
           "actually formed exceed B, the scope (a head, a layer or the model) is re-solved at a nominal B' < B (equal memory)";
  return "nominal = the code rate the solver counted against B = " + B +
         " (the tiers' code bits); B counts code bits only: metadata is not held to B, so the total memory of "
         "two allocations at one B can differ (the code-bit variant; --rate total compares at equal memory)";
}

std::string Tier::name() const {
  const TierForm* f = find_form(*this);
  if (!f) return method.empty() ? "unknown" : method + "?";
  std::string s = f->prefix;
  if (!f->has_bits) return s;
  s += std::to_string(bits);
  if (f->has_group && group > 0 && group != f->default_group) (s += 'g') += std::to_string(group);
  return s;
}

std::string Tier::quantizer() const { return kind == QuantizerKind::Published ? method : std::string(to_string(kind)); }

Tier Tier::parse(std::string_view name) {
  const std::string_view full = name;
  const TierForm* form = nullptr;
  for (const TierForm& f : tier_forms()) {
    const bool match = f.has_bits ? name.starts_with(f.prefix) : name == f.prefix;
    if (match && (!form || f.prefix.size() > form->prefix.size())) form = &f;
  }
  if (!form) bad_tier_name(full);
  Tier t(form->kind, form->min_bits, form->default_group,
         form->kind == QuantizerKind::Published ? form->prefix : std::string());
  if (!form->has_bits) return t;
  name.remove_prefix(form->prefix.size());
  if (!take_int(name, t.bits) || t.bits < form->min_bits || t.bits > form->max_bits) bad_tier_name(full);
  if (!name.empty()) {
    if (!form->has_group || name.front() != 'g') bad_tier_name(full);
    name.remove_prefix(1);
    if (!take_int(name, t.group) || t.group < 1 || !name.empty()) bad_tier_name(full);
  }
  return t;
}

Rate Tier::nominal_rate(int head_dim) const {
  const std::optional<Rate> r = make_tier_quantizer(*this)->closed_nominal_rate(head_dim);
  if (!r)
    throw InputError("Tier " + name() + ": its nominal rate depends on the head's data (T, calibration); the head is "
                     "needed: call nominal_rate(head, rope, tier) (model/quantizers/quantizer.hpp).");
  return *r;
}

std::string RateLadder::name() const {
  std::string s;
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    if (i) s += ",";
    s += tiers[i].name();
  }
  return s;
}

RateLadder RateLadder::parse(std::string_view list) {
  RateLadder ladder;
  std::string_view rest = list;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    if (!item.empty()) {
      ladder.tiers.push_back(Tier::parse(item));
    } else if (comma != std::string_view::npos || !trim(list).empty()) {
      throw InputError("Rate ladder '" + std::string(list) + "' has an empty entry; write tiers separated by single commas.");
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (ladder.tiers.empty() || ladder.tiers.front().kind != QuantizerKind::Evict)
    ladder.tiers.insert(ladder.tiers.begin(), Tier::parse("evict"));
  if (ladder.tiers.back().kind != QuantizerKind::Exact) ladder.tiers.push_back(Tier::parse("exact"));
  ladder.validate();
  return ladder;
}

RateLadder RateLadder::kivi(std::vector<int> bits, int group) {
  RateLadder ladder;
  ladder.tiers.push_back(Tier{QuantizerKind::Evict, 0, 0});
  for (int b : bits) ladder.tiers.push_back(Tier{QuantizerKind::KiviPerChannel, b, group});
  ladder.tiers.push_back(Tier{QuantizerKind::Exact, 16, 0});
  ladder.validate();
  return ladder;
}

void RateLadder::validate() const {
  const std::string where = "Rate ladder '" + name() + "'";
  if (tiers.size() < 2)
    throw InputError(where + " has " + std::to_string(tiers.size()) + " tiers; it needs at least evict and exact.");
  if (tiers.size() > 256)
    throw InputError(where + " has " + std::to_string(tiers.size()) + " tiers; at most 256 fit a U8 tier index.");
  if (tiers.front().kind != QuantizerKind::Evict)
    throw InputError(where + " starts with " + tiers.front().name() + "; tier 0 must be evict.");
  if (tiers.back().kind != QuantizerKind::Exact)
    throw InputError(where + " ends with " + tiers.back().name() + "; the last tier must be exact.");
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const Tier& t = tiers[i];
    const std::string tw = where + " tier " + std::to_string(i) + " (" + t.name() + ")";
    t.validate(tw);
    const bool inner = i > 0 && i + 1 < tiers.size();
    if (inner && (t.kind == QuantizerKind::Evict || t.kind == QuantizerKind::Exact))
      throw InputError(tw + " is " + std::string(to_string(t.kind)) + "; only tier 0 may be evict and only the last exact.");
    if (i > 0 && t.bits <= tiers[i - 1].bits)
      throw InputError(tw + " has " + std::to_string(t.bits) + " code bits, not more than the previous tier's " +
                       std::to_string(tiers[i - 1].bits) + "; code bits must strictly increase along the ladder.");
  }
}

int RateLadder::index_of_bits(int b) const {
  for (int j = 1; j + 1 < size(); ++j)
    if (tiers[static_cast<std::size_t>(j)].bits == b) return j;
  return -1;
}

}  // namespace tierlab
