// Tiers, their names and nominal rates, and the rate ladder (tier.hpp).
#include "model/tier.hpp"

#include <charconv>
#include <string>

#include "model/error.hpp"

namespace tierlab {

namespace {

constexpr int kDefaultKiviGroup = 32;
constexpr int kMaxFiniteBits = 15;  // 16 bits is the exact tier

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
  throw InputError("Tier name '" + std::string(name) +
                   "' is not valid; valid forms are evict, exact, kivi<b>[g<G>] (e.g. kivi2, kivi4g64) "
                   "and token<b>[g<n>] (e.g. token4, token4g64), with 1 <= b <= 15.");
}

// Checks one tier on its own (bits and group in range); `where` names it in messages.
void validate_tier(const Tier& t, const std::string& where) {
  switch (t.kind) {
    case QuantizerKind::Evict:
      if (t.bits != 0) throw InputError(where + " is evict but has bits = " + std::to_string(t.bits) + " (must be 0).");
      return;
    case QuantizerKind::Exact:
      if (t.bits != 16) throw InputError(where + " is exact but has bits = " + std::to_string(t.bits) + " (must be 16).");
      return;
    case QuantizerKind::KiviPerChannel:
    case QuantizerKind::PerToken:
      if (t.bits < 1 || t.bits > kMaxFiniteBits)
        throw InputError(where + " has bits = " + std::to_string(t.bits) + "; a finite tier needs 1 <= bits <= 15.");
      if (t.group < 0)
        throw InputError(where + " has group = " + std::to_string(t.group) + "; the group size must be >= 0 (0 = default).");
      return;
  }
  throw InputError(where + " has an unknown quantizer kind.");
}

}  // namespace

std::string_view to_string(QuantizerKind k) {
  switch (k) {
    case QuantizerKind::Evict: return "evict";
    case QuantizerKind::Exact: return "exact";
    case QuantizerKind::KiviPerChannel: return "kivi";
    case QuantizerKind::PerToken: return "token";
  }
  return "unknown";
}

QuantizerKind parse_quantizer_kind(std::string_view s) {
  if (s == "evict") return QuantizerKind::Evict;
  if (s == "exact") return QuantizerKind::Exact;
  if (s == "kivi") return QuantizerKind::KiviPerChannel;
  if (s == "token") return QuantizerKind::PerToken;
  throw InputError("Quantizer kind '" + std::string(s) + "' is not valid; valid choices are evict, exact, kivi, token.");
}

std::string_view to_string(RateKind k) { return k == RateKind::Code ? "code" : "total"; }

RateKind parse_rate_kind(std::string_view s) {
  if (s == "code") return RateKind::Code;
  if (s == "total") return RateKind::Total;
  throw InputError("Rate kind '" + std::string(s) + "' is not valid; valid choices are code, total.");
}

std::string Tier::name() const {
  switch (kind) {
    case QuantizerKind::Evict: return "evict";
    case QuantizerKind::Exact: return "exact";
    case QuantizerKind::KiviPerChannel: {
      std::string s = "kivi";
      s += std::to_string(bits);
      if (group > 0 && group != kDefaultKiviGroup) (s += 'g') += std::to_string(group);
      return s;
    }
    case QuantizerKind::PerToken: {
      std::string s = "token";
      s += std::to_string(bits);
      if (group > 0) (s += 'g') += std::to_string(group);
      return s;
    }
  }
  return "unknown";
}

Tier Tier::parse(std::string_view name) {
  const std::string_view full = name;
  if (name == "evict") return Tier{QuantizerKind::Evict, 0, 0};
  if (name == "exact") return Tier{QuantizerKind::Exact, 16, 0};
  Tier t;
  if (name.starts_with("kivi")) {
    t.kind = QuantizerKind::KiviPerChannel;
    t.group = kDefaultKiviGroup;
    name.remove_prefix(4);
  } else if (name.starts_with("token")) {
    t.kind = QuantizerKind::PerToken;
    t.group = 0;
    name.remove_prefix(5);
  } else {
    bad_tier_name(full);
  }
  if (!take_int(name, t.bits) || t.bits < 1 || t.bits > kMaxFiniteBits) bad_tier_name(full);
  if (!name.empty()) {
    if (name.front() != 'g') bad_tier_name(full);
    name.remove_prefix(1);
    if (!take_int(name, t.group) || t.group < 1 || !name.empty()) bad_tier_name(full);
  }
  return t;
}

Rate Tier::nominal_rate(int head_dim) const {
  switch (kind) {
    case QuantizerKind::Evict: return {0.0, 0.0};
    case QuantizerKind::Exact: return {16.0, 16.0};
    case QuantizerKind::KiviPerChannel: {
      const int g = group > 0 ? group : kDefaultKiviGroup;
      return {double(bits), bits + 32.0 / g};
    }
    case QuantizerKind::PerToken: {
      if (head_dim <= 0)
        throw InputError("Tier " + name() + ": head_dim = " + std::to_string(head_dim) + " must be positive.");
      const int n = group > 0 ? group : head_dim;
      const int groups_per_token = (head_dim + n - 1) / n;  // a partial last channel group counts
      return {double(bits), bits + 32.0 * groups_per_token / head_dim};
    }
  }
  return {};
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
    validate_tier(t, tw);
    const bool inner = i > 0 && i + 1 < tiers.size();
    if (inner && (t.kind == QuantizerKind::Evict || t.kind == QuantizerKind::Exact))
      throw InputError(tw + " is " + std::string(to_string(t.kind)) + "; only tier 0 may be evict and only the last exact.");
    if (i > 0 && t.bits <= tiers[i - 1].bits)
      throw InputError(tw + " has " + std::to_string(t.bits) + " code bits, not more than the previous tier's " +
                       std::to_string(tiers[i - 1].bits) + "; code bits must strictly increase along the ladder.");
  }
}

}  // namespace tierlab
