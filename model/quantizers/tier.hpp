#pragma once
// Tiers and the rate ladder (docs/model.md sections 1, 2 and 12).
//
// A tier tau = (bits b, quantizer Q) is the precision of one key vector. Tier 0 of
// every ladder is eviction (zero rate: the token is removed); the last is exact
// (16-bit). Rates are in bits per key element and always come in two forms:
//   code bits  r_code(tau)  = b
//   total bits r_total(tau) = b + metadata per element
// Nominal (dense) metadata per element, d the head dim:
//   KIVI per-channel, groups of G tokens : fp16 scale + fp16 min per channel per group = 32/G
//   per-token, groups of n channels      : fp16 scale + fp16 zero per token per group  = 32/n
//   exact: 16 / 16;  evict: 0 / 0.
//   published quantizers (turboquant<b>, quarot<b>[g<n>], kvquant<b>, kvcobra<B>): the
//   rate of the dense quantization of the head, every token at that tier, with the
//   quantizer's real metadata (tier_quantizer.hpp); it depends on T and d and, for
//   kvquant and kvcobra, on the head's data, so it needs the head.
// In a mixed allocation the metadata actually formed is counted instead (quantizer.hpp).
// Every tier is quantized through one interface, TierQuantizer (tier_quantizer.hpp), and
// every tier name form is one row of its registry (tier_forms()).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tierlab {

// Published: a registered key quantizer (key_quantizer.hpp) named by Tier::method.
enum class QuantizerKind { Evict, Exact, KiviPerChannel, PerToken, Published };

std::string_view to_string(QuantizerKind);
// to_string(Published) is "published". parse accepts "evict", "exact", "kivi", "token"
// (the kinds a tier names by kind alone); throws InputError naming the valid choices.
QuantizerKind parse_quantizer_kind(std::string_view);

struct Rate {
  double code_bits = 0.0;   // bits per key element spent on codes
  double total_bits = 0.0;  // codes + metadata (scales, zero points, windows, padding)
};

enum class RateKind { Code, Total };
std::string_view to_string(RateKind);
RateKind parse_rate_kind(std::string_view);  // "code" | "total"
inline double rate_of(const Rate& r, RateKind k) { return k == RateKind::Code ? r.code_bits : r.total_bits; }

// The sentences every report prints beside its rate columns, so that a reader sees inline
// what "code", "total" and "nominal" mean (one wording for the CLI, the scenarios and the
// explorer):
//   measured_rate_legend()     code and total as measured on the materialised keys
//   budget_rate_legend(k, B)   what a budget B of kind k held: the nominal rate the solver
//                              counted (dense tier rates, no partial groups) and, for total
//                              bits, that the measured total is held to B (a head over B is
//                              re-solved at B' < B); for code bits, that metadata is not held
std::string measured_rate_legend();
std::string budget_rate_legend(RateKind budget_kind, double budget);

struct Tier {
  QuantizerKind kind = QuantizerKind::Exact;
  int bits = 16;   // code bits per element (0 for evict, 16 for exact; kvcobra: its code budget B)
  int group = 0;   // KIVI: tokens per group G (default 32); per-token, quarot: channels per group (0 = default)
  std::string method;  // Published: the registered key quantizer ("turboquant"); empty otherwise

  Tier() = default;
  Tier(QuantizerKind kind_, int bits_, int group_ = 0, std::string method_ = {})
      : kind(kind_), bits(bits_), group(group_), method(std::move(method_)) {}

  // "evict", "exact", "kivi2" (G=32) or "kivi2g64", "token4" (group d) or "token4g64",
  // "turboquant2", "quarot4" or "quarot4g64", "kvquant3", "kvcobra2" (tier_forms()).
  std::string name() const;
  static Tier parse(std::string_view name);  // inverse of name(); throws InputError listing the forms
  // The quantizer family: "evict", "exact", "kivi", "token" or the method ("turboquant").
  std::string quantizer() const;
  // Checks the tier on its own (bits and group in the range of its form); `where` names it
  // in the InputError.
  void validate(const std::string& where) const;
  // Closed-form nominal rate at head dim d (header comment). Throws InputError for a tier
  // whose rate depends on the head's data (kvquant, kvcobra): use nominal_rate(head, rope, tier).
  Rate nominal_rate(int head_dim) const;
  bool operator==(const Tier&) const = default;
};

// The tiers an allocation may use: tiers[0] is evict, tiers.back() is exact, in
// increasing code bits between them.
struct RateLadder {
  std::vector<Tier> tiers;

  int size() const { return static_cast<int>(tiers.size()); }
  int exact_index() const { return size() - 1; }
  std::string name() const;                        // "evict,kivi2,kivi4,exact"
  static RateLadder parse(std::string_view list);  // comma-separated; adds evict/exact if missing
  static RateLadder kivi(std::vector<int> bits = {2, 4, 8}, int group = 32);
  void validate() const;                           // throws InputError with the reason
  // The index of the first finite tier with `bits` code bits ("the 2-bit tier"), -1 when none.
  int index_of_bits(int bits) const;
};

}  // namespace tierlab
