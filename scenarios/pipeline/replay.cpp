// Compressed-cache replay on the llama2.c model (see replay.hpp for the definitions).
#include "scenarios/pipeline/replay.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "model/allocation.hpp"
#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/base/clock.hpp"

namespace tierlab {

namespace {

constexpr int kDefaultObsWindow = 32;

// log-softmax normaliser of float logits, in double.
double log_sum_exp(const float* logits, int n) {
  double mx = logits[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return mx + std::log(sum);
}

// KL(P || Q) of the softmaxes of two logit vectors, nats.
double kl_divergence(const float* p_logits, const float* q_logits, int n) {
  const double lp = log_sum_exp(p_logits, n), lq = log_sum_exp(q_logits, n);
  double kl = 0;
  for (int i = 0; i < n; ++i) {
    const double log_p = p_logits[i] - lp, log_q = q_logits[i] - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return kl;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

constexpr auto kReplayModes = enum_table<ReplayMode>("replay mode", {{ReplayMode::TeacherForced, "teacher-forced"},
                                                                    {ReplayMode::FreeRunning, "free-running"}});

std::string to_string(ReplayMode m) { return std::string(enum_name(kReplayModes, m)); }

ReplayMode parse_replay_mode(const std::string& s) { return parse_enum(kReplayModes, s); }

KeyCompression KeyCompression::from_policy(const UniformPolicy& policy) {
  KeyCompression c;
  c.label = policy.name();
  c.ladder = policy.ladder();
  c.allocate = [policy](const HeadData& head, const TokenWeights& w) {
    return policy.allocate(static_cast<int>(head.keys.rows()), &w);
  };
  return c;
}

KeyCompression KeyCompression::from_allocation(const Allocation& allocation, const std::string& label) {
  allocation.validate();
  auto a = std::make_shared<Allocation>(allocation);
  KeyCompression c;
  c.label = label;
  c.ladder = a->ladder;
  c.redecidable = false;
  c.n_layers = a->n_layers;
  c.n_kv_heads = a->n_kv_heads;
  c.prompt_len = a->prompt_len;
  c.prompt_tokens = a->trace_tokens;
  c.allocate = [a](const HeadData& head, const TokenWeights&) { return a->head(head.layer, head.kv_head); };
  return c;
}

KeyCompression KeyCompression::from_compressor(ModelCompressor compress, const std::string& label) {
  KeyCompression c;
  c.label = label;
  c.compress = std::move(compress);
  return c;
}

std::string ReplayOptions::validate() const {
  if (decode_steps < 1) return "decode steps S = " + std::to_string(decode_steps) + " must be at least 1";
  if (obs_window < 1 && obs_window != -1) {
    return "observation window W = " + std::to_string(obs_window) + " must be at least 1 (or -1 for min(32, T))";
  }
  if (redecide_every < 0) return "re-decision interval N = " + std::to_string(redecide_every) + " is negative";
  if (prompt.ids.empty() && prompt.generate <= 0) {
    return "the prompt is missing (give token ids, or a number of tokens to generate from BOS)";
  }
  return {};
}

namespace {

// The replay's lengths against the model and the compression: the prompt and the decode
// steps fit the context, the window fits the prompt, and the compression fits the model.
void check_replay_fits(const Llama2cModel& model, const Llama2cConfig& c, const KeyCompression& comp, int T, int S,
                       int W, int N) {
  if (static_cast<long long>(T) + S > c.seq_len) {
    throw InputError("replay: " + std::to_string(T) + " prompt tokens + " + std::to_string(S) +
                     " decode steps exceed " + model.name() + "'s seq_len = " + std::to_string(c.seq_len) + ".");
  }
  if (W > T) {
    throw InputError("replay: observation window W = " + std::to_string(W) + " is longer than the prompt (T = " +
                     std::to_string(T) + ").");
  }
  if (N > 0 && !comp.redecidable) {
    throw InputError("replay: " + comp.label + " is a fixed allocation and cannot be re-decided every " +
                     std::to_string(N) + " steps (re-decision needs a policy).");
  }
  if ((comp.n_layers >= 0 && comp.n_layers != c.n_layers) || (comp.n_kv_heads >= 0 && comp.n_kv_heads != c.n_kv_heads) ||
      (comp.prompt_len >= 0 && comp.prompt_len != T)) {
    throw InputError("replay: " + comp.label + " is for " + std::to_string(comp.n_layers) + " layers x " +
                     std::to_string(comp.n_kv_heads) + " KV heads x " + std::to_string(comp.prompt_len) +
                     " prompt tokens, but " + model.name() + " with this prompt has " + std::to_string(c.n_layers) +
                     " x " + std::to_string(c.n_kv_heads) + " x " + std::to_string(T) + ".");
  }
  if (!comp.compress) comp.ladder.validate();
}

// The exact prompt keys and values of the full cache, per layer (T x kv_dim).
void read_exact_prompt_cache(const Llama2cSession& full, const Llama2cConfig& c, int T,
                             std::vector<MatrixRM>& exact_keys, std::vector<MatrixRM>& values) {
  for (int l = 0; l < c.n_layers; ++l) {
    exact_keys[l].resize(T, c.kv_dim());
    values[l].resize(T, c.kv_dim());
    for (int t = 0; t < T; ++t) {
      exact_keys[l].row(t) = Eigen::Map<const Eigen::RowVectorXf>(full.key(l, t), c.kv_dim());
      values[l].row(t) = Eigen::Map<const Eigen::RowVectorXf>(full.value(l, t), c.kv_dim());
    }
  }
}

// One replay's compressed cache and the steps that fill and read it: deciding the prompt's
// keys from the exact ones (again every N steps), and decoding S steps with the full and
// the compressed cache side by side. It sums the rate and evicted share of each decision.
struct CompressedReplay {
  const ReplayOptions& options;
  const KeyCompression& comp;
  const Llama2cConfig& c;
  const int T, W;
  const std::vector<MatrixRM>& exact_keys;  // per layer, T x kv_dim
  const std::vector<MatrixRM>& values;
  const ActivationRecorder& full_rec;
  Llama2cSession& full;
  Llama2cSession& compressed;
  ActivationRecorder& comp_rec;
  ReplayResult& r;
  const int S = options.decode_steps, N = options.redecide_every, V = c.vocab_size, hs = c.head_size(),
            g = c.group_size();
  double rate_code = 0, rate_total = 0, evicted = 0;
  long long decided_heads = 0;

  void store_head(int l, int h, const MatrixRM& keys, const std::vector<std::uint8_t>& kept, const Rate& rate);
  void decide_all(int end);
  void decide(int end);
  void decode(std::int32_t first);
  void check_logits(const float* logits, int step, int pos, const char* cache) const;
  void check_number(double v, const char* what, int step) const;
};

// Puts one head's compressed prompt keys (T x head size) and kept flags into the
// compressed cache and counts its rate and evicted share.
void CompressedReplay::store_head(int l, int h, const MatrixRM& keys, const std::vector<std::uint8_t>& kept,
                                  const Rate& rate) {
  int n_evicted = 0;
  for (int t = 0; t < T; ++t) {
    compressed.set_key(l, h, t, keys.row(t).data());
    compressed.set_kept(l, h, t, kept[t] != 0);
    n_evicted += kept[t] == 0;
  }
  rate_code += rate.code_bits;
  rate_total += rate.total_bits;
  evicted += static_cast<double>(n_evicted) / T;
  ++decided_heads;
}

// (Re)compress the prompt's keys from the exact ones, with the W queries before `end`.
// A generic compressor sees every head at once.
void CompressedReplay::decide_all(int end) {
  std::vector<std::vector<HeadData>> heads(static_cast<std::size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      HeadData hd;
      hd.layer = l;
      hd.kv_head = h;
      hd.keys = exact_keys[l].middleCols(h * hs, hs);
      hd.keys_pre_rope = full_rec.keys_pre_rope(l).topRows(T).middleCols(h * hs, hs);
      hd.values = values[l].middleCols(h * hs, hs);
      hd.obs_queries = gather_head_queries(comp_rec.queries(l), h, g, hs, end - W, W);
      hd.group_size = g;
      hd.obs_first_position = end - W;
      heads[static_cast<std::size_t>(l)].push_back(std::move(hd));
    }
  const std::vector<std::vector<CompressedHead>> out = comp.compress(heads);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const CompressedHead& ch = out.at(static_cast<std::size_t>(l)).at(static_cast<std::size_t>(h));
      if (ch.keys.rows() != T || ch.keys.cols() != hs || static_cast<int>(ch.kept.size()) != T)
        throw InputError("replay: " + comp.label + " gave compressed keys of the wrong shape for head (" +
                         std::to_string(l) + ", " + std::to_string(h) + ").");
      store_head(l, h, ch.keys, ch.kept, ch.rate);
    }
  ++r.decisions;
}

// (Re)compress the prompt's keys from the exact ones, with the W queries before `end`:
// per head, the allocation of the compression's policy materialized on its ladder.
void CompressedReplay::decide(int end) {
  if (comp.compress) return decide_all(end);
  const bool needs_head = ladder_needs_head(comp.ladder);
  for (int l = 0; l < c.n_layers; ++l) {
    for (int h = 0; h < c.n_kv_heads; ++h) {
      HeadData hd;
      hd.layer = l;
      hd.kv_head = h;
      hd.keys = exact_keys[l].middleCols(h * hs, hs);
      hd.values = values[l].middleCols(h * hs, hs);
      hd.obs_queries = gather_head_queries(comp_rec.queries(l), h, g, hs, end - W, W);
      hd.group_size = g;
      hd.obs_first_position = end - W;
      if (needs_head) hd.keys_pre_rope = full_rec.keys_pre_rope(l).topRows(T).middleCols(h * hs, hs);
      const TokenWeights w = token_weights(hd.keys, hd.values, observation_queries(hd));
      const std::vector<std::uint8_t> tiers = comp.allocate(hd, w);
      if (static_cast<int>(tiers.size()) != T) {
        throw InputError("replay: " + comp.label + " gave " + std::to_string(tiers.size()) + " tiers for head (" +
                         std::to_string(l) + ", " + std::to_string(h) + "), expected T = " + std::to_string(T) + ".");
      }
      // The head-aware form for every ladder (kvquant and kvcobra tiers need the pre-RoPE
      // keys, the observation queries and llama2.c's RoPE; the other tiers read the keys).
      const MaterializedKeys mk = materialize(hd, llama2c_rope(full.model().config()), comp.ladder, tiers);
      store_head(l, h, mk.keys, mk.kept, mk.rate);
    }
  }
  ++r.decisions;
}

// Decode steps 1..S from `first` with both caches (re-deciding every N steps), comparing
// the next-token distributions, and the summary of the steps and decisions.
// Every number a replay prints is finite: a checkpoint whose weights are finite can still
// overflow float32 in the forward pass, and its NaN must not be reported as a KL.
void CompressedReplay::check_logits(const float* logits, int step, int pos, const char* cache) const {
  for (int i = 0; i < V; ++i) {
    if (!std::isfinite(logits[i])) {
      throw InputError("replay of '" + r.checkpoint + "': decode step " + std::to_string(step) + " (position " +
                       std::to_string(pos) + "): the " + cache + " cache's logit of token " + std::to_string(i) +
                       " is " + (std::isnan(logits[i]) ? "NaN" : "Inf") +
                       "; the checkpoint's weights overflow the float32 forward pass, so no KL or perplexity can be "
                       "reported.");
    }
  }
}

void CompressedReplay::check_number(double v, const char* what, int step) const {
  if (std::isfinite(v)) return;
  throw InputError("replay of '" + r.checkpoint + "': the " + std::string(what) +
                   (step > 0 ? " of decode step " + std::to_string(step) : std::string(" over the decode steps")) +
                   " is " + (std::isnan(v) ? "NaN" : "infinite") +
                   " (the logits overflow double precision); no result is reported.");
}

void CompressedReplay::decode(std::int32_t first) {
  std::vector<float> p_logits(static_cast<std::size_t>(V));
  double sum_kl = 0, sum_nll_full = 0, sum_nll_comp = 0;
  int matches = 0, continuation_matches = 0;
  std::int32_t input = first;
  for (int s = 1; s <= S; ++s) {
    if (s == 1 || (N > 0 && (s - 1) % N == 0)) decide(T + s - 1);
    const int pos = T + s - 1;
    r.inputs.push_back(input);
    const float* lp = full.forward(input, pos);
    std::copy(lp, lp + V, p_logits.begin());
    const float* lq = compressed.forward(input, pos, &comp_rec);
    ReplayStep st;
    st.step = s;
    st.input = input;
    st.full_argmax = argmax(p_logits.data(), V);
    st.compressed_argmax = argmax(lq, V);
    check_logits(p_logits.data(), s, pos, "full");
    check_logits(lq, s, pos, "compressed");
    st.kl = kl_divergence(p_logits.data(), lq, V);
    st.nll_full = log_sum_exp(p_logits.data(), V) - p_logits[st.full_argmax];
    st.nll_compressed = log_sum_exp(lq, V) - lq[st.full_argmax];
    check_number(st.kl, "KL", s);
    check_number(st.nll_full, "negative log-likelihood under the full cache", s);
    check_number(st.nll_compressed, "negative log-likelihood under the compressed cache", s);
    if (st.full_argmax == st.compressed_argmax) {
      ++matches;
    } else if (r.first_divergence < 0) {
      r.first_divergence = s;
    }
    sum_kl += st.kl;
    r.max_kl = std::max(r.max_kl, st.kl);
    sum_nll_full += st.nll_full;
    sum_nll_comp += st.nll_compressed;
    if (options.mode == ReplayMode::TeacherForced) {
      input = st.full_argmax;
      r.full_continuation.push_back(input);
    } else {
      input = st.compressed_argmax;
      continuation_matches += input == r.full_continuation[s];
    }
    r.steps.push_back(st);
  }
  r.agreement = static_cast<double>(matches) / S;
  r.mean_kl = sum_kl / S;
  r.ppl_full = std::exp(sum_nll_full / S);
  r.ppl_compressed = std::exp(sum_nll_comp / S);
  check_number(r.mean_kl, "mean KL", 0);
  check_number(r.ppl_full, "perplexity under the full cache", 0);
  check_number(r.ppl_compressed, "perplexity under the compressed cache", 0);
  if (options.mode == ReplayMode::FreeRunning) r.continuation_match = static_cast<double>(continuation_matches) / S;
  r.key_rate.code_bits = rate_code / decided_heads;
  r.key_rate.total_bits = rate_total / decided_heads;
  r.evicted_fraction = evicted / decided_heads;
}

}  // namespace

namespace {
std::string shorten(const std::string& s) { return s.size() > 60 ? s.substr(0, 60) + "..." : s; }
}  // namespace

ReplayResult replay(const Llama2cModel& model, const ReplayOptions& options, const KeyCompression& comp) {
  const auto t0 = std::chrono::steady_clock::now();
  if (const std::string p = options.validate(); !p.empty()) throw InputError("replay: " + p + ".");
  const Llama2cConfig& c = model.config();
  const std::vector<std::int32_t> prompt = resolve_prompt(model, options.prompt);
  const int T = static_cast<int>(prompt.size()), S = options.decode_steps;
  const int W = options.obs_window < 0 ? std::min(kDefaultObsWindow, T) : options.obs_window;
  const int N = options.redecide_every, V = c.vocab_size;
  check_replay_fits(model, c, comp, T, S, W, N);
  if (!comp.prompt_tokens.empty() && comp.prompt_tokens != token_list(prompt))
    throw InputError("replay: " + comp.label + " was solved for another prompt (its trace's tokens are " +
                     shorten(comp.prompt_tokens) + "; this replay's prompt is " + shorten(token_list(prompt)) +
                     "): give the same prompt (--prompt-ids), or solve again on a trace of this prompt.");

  ReplayResult r;
  r.model = model.name();
  r.checkpoint = model.path();
  r.compression = comp.label;
  r.ladder = comp.compress ? std::string("(per-method compressor)") : comp.ladder.name();
  r.mode = options.mode;
  r.prompt_len = T;
  r.decode_steps = S;
  r.obs_window = W;
  r.redecide_every = N;
  r.prompt = prompt;

  // Prefill with the full cache, recording the queries (observation queries).
  ActivationRecorder::Fields qonly;
  qonly.keys = qonly.keys_pre_rope = qonly.values = false;
  // Pre-RoPE keys for the quantizers that work before RoPE (KVQuant; KV-COBRA's basis).
  qonly.keys_pre_rope = static_cast<bool>(comp.compress) || (!comp.compress && ladder_needs_head(comp.ladder));
  ActivationRecorder full_rec(c, T + S, qonly);
  Llama2cSession full(model);
  const float* logits = nullptr;
  for (int pos = 0; pos < T; ++pos) logits = full.forward(prompt[pos], pos, &full_rec);
  const std::int32_t first = argmax(logits, V);
  Llama2cSession compressed = full;
  ActivationRecorder comp_rec = full_rec;

  // The full cache's own greedy continuation x_1..x_{S+1}.
  r.full_continuation.push_back(first);
  if (options.mode == ReplayMode::FreeRunning) {
    Llama2cSession ref = full;
    for (int s = 1; s <= S; ++s) r.full_continuation.push_back(argmax(ref.forward(r.full_continuation[s - 1], T + s - 1), V));
  }

  // The exact prompt keys and values, per layer (T x kv_dim).
  std::vector<MatrixRM> exact_keys(static_cast<std::size_t>(c.n_layers)), values(static_cast<std::size_t>(c.n_layers));
  read_exact_prompt_cache(full, c, T, exact_keys, values);

  CompressedReplay run{.options = options,
                       .comp = comp,
                       .c = c,
                       .T = T,
                       .W = W,
                       .exact_keys = exact_keys,
                       .values = values,
                       .full_rec = full_rec,
                       .full = full,
                       .compressed = compressed,
                       .comp_rec = comp_rec,
                       .r = r};
  run.decode(first);
  r.seconds = seconds_since(t0);
  return r;
}

nlohmann::ordered_json to_json(const ReplayResult& r) {
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const ReplayStep& s : r.steps) {
    steps.push_back({{"step", s.step},
                     {"input", s.input},
                     {"full_argmax", s.full_argmax},
                     {"compressed_argmax", s.compressed_argmax},
                     {"kl", s.kl},
                     {"nll_full", s.nll_full},
                     {"nll_compressed", s.nll_compressed}});
  }
  nlohmann::ordered_json j = {
      {"model", r.model},
      {"checkpoint", r.checkpoint},
      {"compression", r.compression},
      {"ladder", r.ladder},
      {"mode", to_string(r.mode)},
      {"prompt_len", r.prompt_len},
      {"decode_steps", r.decode_steps},
      {"obs_window", r.obs_window},
      {"redecide_every", r.redecide_every},
      {"decisions", r.decisions},
      {"key_rate", {{"code_bits", r.key_rate.code_bits}, {"total_bits", r.key_rate.total_bits}}},
      {"evicted_fraction", r.evicted_fraction},
      {"agreement", r.agreement},
      {"first_divergence", r.first_divergence},
      {"mean_kl", r.mean_kl},
      {"max_kl", r.max_kl},
      {"ppl_full", r.ppl_full},
      {"ppl_compressed", r.ppl_compressed},
      {"continuation_match", r.continuation_match < 0 ? nlohmann::ordered_json(nullptr)
                                                      : nlohmann::ordered_json(r.continuation_match)},
      {"prompt", r.prompt},
      {"full_continuation", r.full_continuation},
      {"inputs", r.inputs},
      {"steps", steps},
      {"seconds", r.seconds}};
  return j;
}

std::string text_report(const ReplayResult& r) {
  std::ostringstream os;
  const int matched = static_cast<int>(std::lround(r.agreement * r.decode_steps));
  os << "replay       " << r.model << " (" << r.checkpoint << "), prompt T=" << r.prompt_len << ", S=" << r.decode_steps
     << " decode steps, " << to_string(r.mode) << "\n";
  os << "compression  " << r.compression << " (ladder " << r.ladder << "), ";
  if (r.redecide_every > 0) {
    os << "re-decided every " << r.redecide_every << " steps (" << r.decisions << " decisions)";
  } else {
    os << "decided once after the prompt";
  }
  os << ", W=" << r.obs_window << " observation queries\n";
  os << "key rate     " << fixed(r.key_rate.code_bits, 2) << " code bits / " << fixed(r.key_rate.total_bits, 2)
     << " total bits per element of the prompt's keys; " << fixed(100 * r.evicted_fraction, 1) << "% evicted\n";
  os << "agreement    " << fixed(r.agreement, 3) << " (" << matched << "/" << r.decode_steps
     << " greedy tokens match the full cache), first divergence "
     << (r.first_divergence < 0 ? std::string("none") : "at step " + std::to_string(r.first_divergence)) << "\n";
  if (r.continuation_match >= 0) {
    os << "continuation " << fixed(r.continuation_match, 3)
       << " of the generated tokens equal the full cache's own continuation\n";
  }
  os << "KL           mean " << fixed(r.mean_kl, 6) << " nats, max " << fixed(r.max_kl, 6)
     << " nats (full || compressed, next-token distributions)\n";
  os << "perplexity   " << fixed(r.ppl_compressed, 4) << " under the compressed cache, " << fixed(r.ppl_full, 4)
     << " under the full cache (of the full cache's greedy tokens)\n";
  return os.str();
}

}  // namespace tierlab
