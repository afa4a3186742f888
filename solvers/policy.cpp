#include "solvers/policy.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"

namespace tierlab {
namespace {

const char* kForms =
    "valid policies: exact, kivi:B[:gG][:rR] (B in 1..8), token:B[:gN] (B in 1..8), evict:KEEP (0 < KEEP <= 1)";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

int parse_int(const std::string& text, const std::string& what, const std::string& policy) {
  const std::optional<std::int64_t> v = read_integer(text);  // model/base/numbers.hpp: the whole text
  if (v && *v >= INT_MIN && *v <= INT_MAX) return static_cast<int>(*v);
  throw InputError("policy '" + policy + "': " + what + " '" + text + "' is not an integer (" + kForms + ")");
}

}  // namespace

UniformPolicy UniformPolicy::parse(const std::string& text) {
  const auto parts = split(text, ':');
  if (parts.empty()) throw InputError(std::string("empty policy (") + kForms + ")");
  UniformPolicy p;
  const std::string& head = parts[0];
  if (head == "exact" && parts.size() == 1) {
    p.kind = Kind::Exact;
    return p;
  }
  if ((head == "kivi" || head == "token") && parts.size() >= 2) {
    p.kind = head == "kivi" ? Kind::Kivi : Kind::Token;
    p.bits = parse_int(parts[1], "bits", text);
    if (p.bits < 1 || p.bits > 8) throw InputError("policy '" + text + "': bits " + parts[1] + " out of range (" + kForms + ")");
    p.group = p.kind == Kind::Kivi ? 32 : 0;
    p.residual = p.kind == Kind::Kivi ? 128 : 0;
    for (std::size_t i = 2; i < parts.size(); ++i) {
      const std::string& opt = parts[i];
      if (opt.size() >= 2 && opt[0] == 'g') {
        p.group = parse_int(opt.substr(1), "group", text);
        if (p.group < 1) throw InputError("policy '" + text + "': group must be >= 1");
      } else if (opt.size() >= 2 && opt[0] == 'r' && p.kind == Kind::Kivi) {
        p.residual = parse_int(opt.substr(1), "residual window", text);
        if (p.residual < 0) throw InputError("policy '" + text + "': residual window must be >= 0");
      } else {
        throw InputError("policy '" + text + "': unknown option '" + opt + "' (" + kForms + ")");
      }
    }
    if (p.kind == Kind::Kivi && p.residual > 0 && p.residual % p.group != 0)
      throw InputError("policy '" + text + "': KIVI's residual window R=" + std::to_string(p.residual) +
                       " must be a multiple of the group G=" + std::to_string(p.group));
    return p;
  }
  if (head == "evict" && parts.size() == 2) {
    p.kind = Kind::Evict;
    const std::optional<double> keep = read_real(parts[1]);  // model/base/numbers.hpp: the whole text, finite
    if (!keep) throw InputError("policy '" + text + "': keep fraction '" + parts[1] + "' is not a number (" + kForms + ")");
    p.keep = *keep;
    if (!(p.keep > 0.0 && p.keep <= 1.0))
      throw InputError("policy '" + text + "': keep fraction " + parts[1] + " must be in (0, 1]");
    return p;
  }
  throw InputError("unknown policy '" + text + "' (" + kForms + ")");
}

std::string UniformPolicy::name() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::Exact: return "exact";
    case Kind::Kivi: os << "kivi:" << bits << ":g" << group << ":r" << residual; break;
    case Kind::Token: os << "token:" << bits; if (group) os << ":g" << group; break;
    case Kind::Evict: os << "evict:" << keep; break;
  }
  return os.str();
}

std::string UniformPolicy::full_precision_note(int n_tokens) const {
  if (kind != Kind::Kivi || residual <= 0) return {};
  const int window = n_tokens % residual;
  if (window == 0) return {};
  UniformPolicy every = *this;
  every.residual = 0;
  const std::string T = std::to_string(n_tokens), R = std::to_string(residual), W = std::to_string(window);
  return "policy " + name() + " keeps the last " + W + " of " + T + " prompt tokens in full precision (KIVI's residual window R = " +
         R + " holds T mod R = " + W + (window == n_tokens ? " tokens: every token is exact, T < R" : " tokens") +
         "); the solver's kivi" + std::to_string(bits) + " tier quantizes every token, as " + every.name() + " does.";
}

RateLadder UniformPolicy::ladder() const {
  RateLadder ladder;
  ladder.tiers.push_back(Tier{QuantizerKind::Evict, 0, 0});
  if (kind == Kind::Kivi) ladder.tiers.push_back(Tier{QuantizerKind::KiviPerChannel, bits, group});
  if (kind == Kind::Token) ladder.tiers.push_back(Tier{QuantizerKind::PerToken, bits, group});
  ladder.tiers.push_back(Tier{QuantizerKind::Exact, 16, 0});
  return ladder;
}

std::vector<std::uint8_t> UniformPolicy::allocate(int n_tokens, const TokenWeights* weights) const {
  const std::uint8_t exact = kind == Kind::Kivi || kind == Kind::Token ? 2 : 1;
  std::vector<std::uint8_t> tiers(static_cast<std::size_t>(n_tokens), exact);
  switch (kind) {
    case Kind::Exact: break;
    case Kind::Kivi: {
      // KIVI after prefill: T - (T mod R) tokens quantized, the last T mod R full precision.
      const int window = residual > 0 ? n_tokens % residual : 0;
      std::fill(tiers.begin(), tiers.end() - window, std::uint8_t{1});
      break;
    }
    case Kind::Token: std::fill(tiers.begin(), tiers.end(), std::uint8_t{1}); break;
    case Kind::Evict: {
      if (!weights || weights->evict_cost.size() != n_tokens)
        throw InputError("policy '" + name() + "' needs the token weights c_t(0) of the head");
      const int keep_n = std::max(1, static_cast<int>(std::lround(keep * n_tokens)));
      std::vector<int> order(static_cast<std::size_t>(n_tokens));
      std::iota(order.begin(), order.end(), 0);
      // Largest c_t(0) first; ties broken by position (later first) for determinism.
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const double ca = weights->evict_cost[a], cb = weights->evict_cost[b];
        return ca != cb ? ca > cb : a > b;
      });
      std::fill(tiers.begin(), tiers.end(), std::uint8_t{0});
      for (int i = 0; i < keep_n; ++i) tiers[order[i]] = exact;
      break;
    }
  }
  return tiers;
}

std::vector<MethodInfo> uniform_policy_methods() {
  const std::string own = "tierlab (solvers/policy.hpp)";
  return {
      {"exact", "uniform policy", "every token at the exact tier (the reference)", own, {}, {"exact"}},
      {"kivi:B[:gG][:rR]", "uniform policy",
       "KIVI per-channel B-bit keys in groups of G tokens; the last T mod R tokens full precision",
       "arXiv 2402.02750, jy-yuan/KIVI",
       {{"B", "", "code bits"}, {"G", "32", "tokens per group"}, {"R", "128", "residual window (r0 = none)"}},
       {"kivi:2", "kivi:4"}},
      {"token:B[:gN]", "uniform policy", "per-token B-bit keys in groups of N channels", own,
       {{"B", "", "code bits"}, {"N", "d", "channels per group"}}, {"token:4"}},
      {"evict:KEEP", "uniform policy", "keep the fraction KEEP of tokens with the largest c_t(0), evict the rest", own,
       {{"KEEP", "", "kept fraction in (0, 1]"}}, {"evict:0.25"}}};
}

}  // namespace tierlab
