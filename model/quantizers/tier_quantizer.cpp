// The tier registry, the adapter that makes a registered key quantizer a tier, and one
// head under a ladder through the TierQuantizer interface (tier_quantizer.hpp).
#include "model/quantizers/tier_quantizer.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "model/base/error.hpp"

namespace tierlab {

namespace {

// TurboQuant (mse) at integer b: b code bits and an fp16 norm per token (turboquant.cpp).
std::optional<TierBits> turboquant_bits(const Tier& t, long long n, int d) {
  const double m = double(n);
  return TierBits{m * (double(d) * t.bits), 16.0 * m};
}

// QuaRot: b code bits, fp16 scale + fp16 zero per token per group of min(group, d) (quarot.cpp).
std::optional<TierBits> quarot_bits(const Tier& t, long long n, int d) {
  const int g = std::min(t.group > 0 ? t.group : 128, d);
  if (!is_power_of_two(d) || d % g != 0)
    throw InputError("Tier " + t.name() + ": head dim d = " + std::to_string(d) +
                     " is not a power of 2 divisible by the group " + std::to_string(g) +
                     ", which quarot's Walsh-Hadamard rotation needs.");
  const double groups = double(n) * (d / g);
  return TierBits{double(n) * d * t.bits, 16.0 * groups + 16.0 * groups};
}

std::vector<TierForm> build_forms() {
  std::vector<TierForm> f;
  auto add = [&f](TierForm form) { f.push_back(std::move(form)); };
  add({"evict", QuantizerKind::Evict, false, 0, 0, false, 0, false, "evict", "evict", "", "", make_evict_tier, nullptr});
  add({"exact", QuantizerKind::Exact, false, 16, 16, false, 0, false, "exact", "exact", "", "", make_exact_tier, nullptr});
  add({"kivi", QuantizerKind::KiviPerChannel, true, 1, 15, true, 32, false, "kivi<b>[g<G>]", "kivi2, kivi4g64", "",
       "", make_kivi_tier, nullptr});
  add({"token", QuantizerKind::PerToken, true, 1, 15, true, 0, false, "token<b>[g<n>]", "token4, token4g64", "", "",
       make_token_tier, nullptr});
  add({"turboquant", QuantizerKind::Published, true, 1, 8, false, 0, false, "turboquant<b>", "turboquant2", "bits",
       "", make_published_tier, turboquant_bits});
  add({"quarot", QuantizerKind::Published, true, 1, 15, true, 0, false, "quarot<b>[g<n>]", "quarot4, quarot4g64",
       "bits", "group", make_published_tier, quarot_bits});
  add({"kvquant", QuantizerKind::Published, true, 1, 8, false, 0, true, "kvquant<b>", "kvquant3", "bits", "",
       make_published_tier, nullptr});
  add({"kvcobra", QuantizerKind::Published, true, 1, 15, false, 0, true, "kvcobra<B>", "kvcobra2", "budget", "",
       make_published_tier, nullptr});
  return f;
}

// A registered key quantizer as a tier: KeyQuantizer::quantize(head, rope, tokens) on the
// tier's tokens, every item of its rate counted (header comment).
class PublishedTier final : public TierQuantizer {
 public:
  PublishedTier(const Tier& t, const TierForm& form)
      : TierQuantizer(t), form_(form), quantizer_(make_key_quantizer(t.method, published_tier_params(t))) {}

  bool needs_head() const override { return form_.needs_head; }

  QuantizedBlock quantize(const TierInput& in, const std::vector<int>& tokens) const override {
    QuantizedBlock block;
    if (tokens.empty()) {  // KeyQuantizer reads an empty list as "every token"
      block.dequant.resize(0, in.keys->cols());
      return block;
    }
    QuantizedHeadKeys q;
    if (in.head) {
      q = quantizer_->quantize(*in.head, *in.rope, tokens);
    } else {
      require_head(in);
      HeadData keys_only;  // the quantizer reads the post-RoPE keys alone (needs_head() is false)
      keys_only.keys = *in.keys;
      q = quantizer_->quantize(keys_only, RopeParams{}, tokens);
    }
    block.dequant = std::move(q.keys);
    block.code_bits = q.code_bits;
    block.meta_bits = q.meta_bits();
    return block;
  }

  std::optional<TierBits> bits_of_count(long long n, int d) const override {
    if (!form_.bits_of_count) return std::nullopt;
    return form_.bits_of_count(tier(), n, d);
  }

  std::optional<Rate> closed_nominal_rate(int d) const override {
    if (d <= 0) throw InputError("Tier " + name() + ": head_dim = " + std::to_string(d) + " must be positive.");
    const std::optional<TierBits> b = bits_of_count(1, d);  // per-token rates: one token is the dense rate
    if (!b) return std::nullopt;
    return Rate{b->code_bits / d, (b->code_bits + b->meta_bits) / d};
  }

 private:
  const TierForm& form_;
  std::unique_ptr<KeyQuantizer> quantizer_;
};

// Tokens of each ladder tier, in position order (docs/model.md convention 9); validates the allocation.
std::vector<std::vector<int>> tokens_by_tier(long long T, const RateLadder& ladder,
                                             const std::vector<std::uint8_t>& tier_of_token, const char* where) {
  ladder.validate();
  if (static_cast<long long>(tier_of_token.size()) != T)
    throw InputError(std::string(where) + ": the allocation has " + std::to_string(tier_of_token.size()) +
                     " tiers but the head has " + std::to_string(T) + " tokens.");
  std::vector<std::vector<int>> by_tier(ladder.size());
  for (long long t = 0; t < T; ++t) {
    const int i = tier_of_token[t];
    if (i >= ladder.size())
      throw InputError(std::string(where) + ": token " + std::to_string(t) + " has tier index " + std::to_string(i) +
                       " but ladder '" + ladder.name() + "' has " + std::to_string(ladder.size()) + " tiers.");
    by_tier[i].push_back(static_cast<int>(t));
  }
  return by_tier;
}

Rate per_element(double code, double meta, long long T, int d) {
  const double elems = double(T) * d;
  if (elems <= 0) return {};
  return {code / elems, (code + meta) / elems};
}

std::vector<int> all_tokens(int T) {
  std::vector<int> all(static_cast<std::size_t>(T));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

}  // namespace

// ---- the interface --------------------------------------------------------------------

TierBits TierQuantizer::quantize_into(const TierInput& in, const std::vector<int>& tokens, MatrixRM& out) const {
  const QuantizedBlock b = quantize(in, tokens);
  for (std::size_t i = 0; i < tokens.size(); ++i) out.row(tokens[i]) = b.dequant.row(static_cast<Eigen::Index>(i));
  return {b.code_bits, b.meta_bits};
}

Rate TierQuantizer::nominal_rate(const TierInput& in) const {
  if (const std::optional<Rate> r = closed_nominal_rate(in.head_dim())) return *r;
  const QuantizedBlock b = quantize(in, all_tokens(in.n_tokens()));
  return per_element(b.code_bits, b.meta_bits, in.n_tokens(), in.head_dim());
}

void TierQuantizer::require_head(const TierInput& in) const {
  if (needs_head() && !in.head)
    throw InputError("Tier " + name() +
                     " needs the head (its pre-RoPE keys, queries and RoPE parameters), not only its keys; call the "
                     "form that takes HeadData and RopeParams (the trace meta's rope).");
}

// ---- the registry ---------------------------------------------------------------------

const std::vector<TierForm>& tier_forms() {
  static const std::vector<TierForm> forms = build_forms();
  return forms;
}

const TierForm& tier_form(const Tier& tier) {
  for (const TierForm& f : tier_forms()) {
    if (f.kind != tier.kind) continue;
    if (tier.kind != QuantizerKind::Published || f.prefix == tier.method) return f;
  }
  throw InputError("Tier of kind " + std::string(to_string(tier.kind)) + " and method '" + tier.method +
                   "' has no tier form; valid forms are " + tier_forms_list() + ".");
}

std::string tier_forms_list() {
  std::string s;
  for (const TierForm& f : tier_forms()) {
    if (!s.empty()) s += ", ";
    s += f.form;
    const std::string b = f.form.find("<B>") != std::string::npos ? "B" : "b";  // kvcobra's B is a budget
    if (f.has_bits)
      s += " (" + std::to_string(f.min_bits) + " <= " + b + " <= " + std::to_string(f.max_bits) + ", e.g. " + f.example + ")";
  }
  return s;
}

KeyQuantizerParams published_tier_params(const Tier& tier) {
  const TierForm& f = tier_form(tier);
  if (tier.kind != QuantizerKind::Published)
    throw InputError("Tier " + tier.name() + " is not a published quantizer's tier; it has no key-quantizer parameters.");
  KeyQuantizerParams p{{f.bits_param, std::to_string(tier.bits)}};
  if (!f.group_param.empty() && tier.group > 0) p[f.group_param] = std::to_string(tier.group);
  return p;
}

std::unique_ptr<TierQuantizer> make_tier_quantizer(const Tier& tier) {
  tier.validate("Tier " + tier.name());
  return tier_form(tier).make(tier);
}

std::unique_ptr<TierQuantizer> make_published_tier(const Tier& tier) {
  return std::make_unique<PublishedTier>(tier, tier_form(tier));
}

// ---- one head under a ladder ----------------------------------------------------------

DenseTier dense_tier(const TierInput& in, const Tier& tier) {
  const auto q = make_tier_quantizer(tier);
  const int T = in.n_tokens(), d = in.head_dim();
  DenseTier out;
  out.keys.resize(T, d);
  const TierBits b = q->quantize_into(in, all_tokens(T), out.keys);
  const std::optional<Rate> closed = q->closed_nominal_rate(d);
  out.nominal = closed ? *closed : per_element(b.code_bits, b.meta_bits, T, d);
  return out;
}

namespace {

MaterializedKeys materialize_with(const TierInput& in, const RateLadder& ladder,
                                  const std::vector<std::uint8_t>& tier_of_token, const TierRowCache* cache) {
  const long long T = in.n_tokens();
  const int d = in.head_dim();
  const auto by_tier = tokens_by_tier(T, ladder, tier_of_token, "materialize");
  MaterializedKeys m;
  m.keys = MatrixRM::Zero(T, d);
  m.kept.assign(static_cast<std::size_t>(T), 1);
  double code = 0.0, meta = 0.0;
  for (int i = 0; i < ladder.size(); ++i) {
    const Tier& tier = ladder.tiers[i];
    if (by_tier[i].empty()) continue;
    if (tier.kind == QuantizerKind::Evict) {
      for (int t : by_tier[i]) m.kept[t] = 0;
      continue;  // rows stay zero, no bits
    }
    const std::unique_ptr<TierQuantizer> q = make_tier_quantizer(tier);
    TierBits b;
    if (const MatrixRM* dense = cache ? cache->rows(i) : nullptr) {
      for (int t : by_tier[i]) m.keys.row(t) = dense->row(t);
      b = *q->bits_of_count(static_cast<long long>(by_tier[i].size()), d);
    } else {
      b = q->quantize_into(in, by_tier[i], m.keys);
    }
    code += b.code_bits;
    meta += b.meta_bits;
  }
  m.rate = per_element(code, meta, T, d);
  return m;
}

}  // namespace

MaterializedKeys materialize(const TierInput& in, const RateLadder& ladder,
                             const std::vector<std::uint8_t>& tier_of_token) {
  return materialize_with(in, ladder, tier_of_token, nullptr);
}

MaterializedKeys materialize(const TierInput& in, const RateLadder& ladder, const std::vector<std::uint8_t>& tier_of_token,
                             const TierRowCache& cache) {
  return materialize_with(in, ladder, tier_of_token, &cache);
}

TierRowCache::TierRowCache(const TierInput& in, const RateLadder& ladder) : dense_(ladder.tiers.size()) {
  std::vector<int> all(static_cast<std::size_t>(in.n_tokens()));
  for (int t = 0; t < in.n_tokens(); ++t) all[static_cast<std::size_t>(t)] = t;
  for (std::size_t i = 0; i < ladder.tiers.size(); ++i) {
    const Tier& tier = ladder.tiers[i];
    if (tier.kind == QuantizerKind::Evict || tier.kind == QuantizerKind::Exact) continue;  // nothing to save
    const std::unique_ptr<TierQuantizer> q = make_tier_quantizer(tier);
    if (!q->token_local() || !q->bits_of_count(1, in.head_dim())) continue;
    auto rows = std::make_shared<MatrixRM>(MatrixRM::Zero(in.n_tokens(), in.head_dim()));
    q->quantize_into(in, all, *rows);
    dense_[i] = std::move(rows);
  }
}

int TierRowCache::cached() const {
  int n = 0;
  for (const auto& d : dense_) n += d ? 1 : 0;
  return n;
}

Rate allocation_rate(const TierInput& in, const RateLadder& ladder, const std::vector<std::uint8_t>& tier_of_token) {
  const long long T = in.n_tokens();
  const int d = in.head_dim();
  const auto by_tier = tokens_by_tier(T, ladder, tier_of_token, "allocation_rate");
  double code = 0.0, meta = 0.0;
  for (int i = 0; i < ladder.size(); ++i) {
    const auto q = make_tier_quantizer(ladder.tiers[i]);
    std::optional<TierBits> b = q->bits_of_count(static_cast<long long>(by_tier[i].size()), d);
    if (!b) {
      const QuantizedBlock blk = q->quantize(in, by_tier[i]);
      b = TierBits{blk.code_bits, blk.meta_bits};
    }
    code += b->code_bits;
    meta += b->meta_bits;
  }
  return per_element(code, meta, T, d);
}

// ---- the signatures of quantizer.hpp ------------------------------------------------------

MatrixRM dense_tier_keys(const HeadData& head, const RopeParams& rope, const Tier& tier) {
  return dense_tier(TierInput::of_head(head, rope), tier).keys;
}

Rate nominal_rate(const HeadData& head, const RopeParams& rope, const Tier& tier) {
  return make_tier_quantizer(tier)->nominal_rate(TierInput::of_head(head, rope));
}

MaterializedKeys materialize(const MatrixRM& keys, const RateLadder& ladder,
                             const std::vector<std::uint8_t>& tier_of_token) {
  return materialize(TierInput::keys_only(keys), ladder, tier_of_token);
}

MaterializedKeys materialize(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                             const std::vector<std::uint8_t>& tier_of_token) {
  return materialize(TierInput::of_head(head, rope), ladder, tier_of_token);
}

Rate allocation_rate(int n_tokens, int head_dim, const RateLadder& ladder,
                     const std::vector<std::uint8_t>& tier_of_token) {
  if (head_dim <= 0) throw InputError("allocation_rate: head_dim = " + std::to_string(head_dim) + " must be positive.");
  const auto by_tier = tokens_by_tier(n_tokens, ladder, tier_of_token, "allocation_rate");
  double code = 0.0, meta = 0.0;
  for (int i = 0; i < ladder.size(); ++i) {
    const std::optional<TierBits> b =
        make_tier_quantizer(ladder.tiers[i])->bits_of_count(static_cast<long long>(by_tier[i].size()), head_dim);
    if (!b)
      throw InputError("allocation_rate: tier " + ladder.tiers[i].name() +
                       " spends bits that depend on the head's data; the head is needed: call "
                       "allocation_rate(head, rope, ladder, tiers).");
    code += b->code_bits;
    meta += b->meta_bits;
  }
  return per_element(code, meta, n_tokens, head_dim);
}

Rate allocation_rate(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                     const std::vector<std::uint8_t>& tier_of_token) {
  return allocation_rate(TierInput::of_head(head, rope), ladder, tier_of_token);
}

}  // namespace tierlab
