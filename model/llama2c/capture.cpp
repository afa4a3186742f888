// Capturing a trace from the llama2.c forward pass (see capture.hpp).
#include "model/llama2c/capture.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/base/clock.hpp"
#include "model/io/head_range.hpp"

namespace tierlab {

namespace {

constexpr int kDefaultObsWindow = 32;

}  // namespace

std::string PromptSpec::describe() const {
  if (!ids.empty()) return "ids";
  std::ostringstream os;
  if (temperature == 0.0f) {
    os << "greedy " << generate << " from BOS";
  } else {
    os << "sampled " << generate << " from BOS (temperature " << temperature << ", seed " << seed << ")";
  }
  return os.str();
}

std::vector<std::int32_t> parse_token_ids(const std::string& text) {
  std::vector<std::int32_t> out;
  std::stringstream ss(text);
  std::string part;
  int index = 0;
  while (std::getline(ss, part, ',')) {
    const auto b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    const std::string item = b == std::string::npos ? std::string() : part.substr(b, e - b + 1);
    const std::optional<std::int64_t> v = read_integer(item);  // model/base/numbers.hpp: the whole entry
    if (!v || *v < 0 || *v > INT32_MAX) {
      throw InputError("token ids '" + text + "': entry " + std::to_string(index) + " = '" + item +
                       "' is not a non-negative integer (expected a comma-separated list such as 1,461,401).");
    }
    out.push_back(static_cast<std::int32_t>(*v));
    ++index;
  }
  if (out.empty()) throw InputError("token ids '" + text + "' is empty (expected a list such as 1,461,401).");
  return out;
}

std::vector<std::int32_t> resolve_prompt(const Llama2cModel& model, const PromptSpec& spec) {
  const Llama2cConfig& c = model.config();
  if (!spec.ids.empty() && spec.generate != 0) {
    throw InputError("prompt: give token ids or a number of tokens to generate, not both.");
  }
  if (!spec.ids.empty()) {
    for (std::size_t i = 0; i < spec.ids.size(); ++i) {
      if (spec.ids[i] < 0 || spec.ids[i] >= c.vocab_size) {
        throw InputError("prompt: token id " + std::to_string(spec.ids[i]) + " at index " + std::to_string(i) +
                         " is out of range for " + model.name() + " (vocab_size = " + std::to_string(c.vocab_size) +
                         ").");
      }
    }
    if (static_cast<long long>(spec.ids.size()) > c.seq_len) {
      throw InputError("prompt: " + std::to_string(spec.ids.size()) + " token ids exceed " + model.name() +
                       "'s seq_len = " + std::to_string(c.seq_len) + ".");
    }
    return spec.ids;
  }
  if (spec.generate < 1 || spec.generate > c.seq_len) {
    throw InputError("prompt: the number of generated prompt tokens " + std::to_string(spec.generate) +
                     " is out of range (expected 1.." + std::to_string(c.seq_len) + ", BOS included).");
  }
  Sampler sampler(spec.temperature, spec.seed);
  return generate(model, {kLlama2cBos}, spec.generate - 1, sampler);
}

// ---- recorder --------------------------------------------------------------------

ActivationRecorder::ActivationRecorder(const Llama2cConfig& c, int n_positions, Fields fields)
    : fields_(fields), n_positions_(n_positions) {
  auto make = [&](bool on, int width, std::vector<MatrixRM>& out) {
    out.assign(static_cast<std::size_t>(c.n_layers), MatrixRM());
    if (!on) return;
    for (auto& m : out) m = MatrixRM::Zero(n_positions, width);
  };
  make(fields.queries, c.dim, q_);
  make(fields.keys, c.kv_dim(), k_);
  make(fields.keys_pre_rope, c.kv_dim(), kp_);
  make(fields.values, c.kv_dim(), v_);
  make(fields.attention_outputs, c.dim, a_);
}

void ActivationRecorder::on_layer(const LayerActivations& a) {
  if (a.pos >= n_positions_) {
    throw InputError("ActivationRecorder: position " + std::to_string(a.pos) + " is beyond the " +
                     std::to_string(n_positions_) + " positions it was made for.");
  }
  auto put = [&](bool on, std::vector<MatrixRM>& m, const float* src) {
    if (!on) return;
    MatrixRM& dst = m[a.layer];
    std::memcpy(dst.row(a.pos).data(), src, static_cast<std::size_t>(dst.cols()) * sizeof(float));
  };
  put(fields_.queries, q_, a.q);
  put(fields_.keys, k_, a.k);
  put(fields_.keys_pre_rope, kp_, a.k_pre);
  put(fields_.values, v_, a.v);
  put(fields_.attention_outputs, a_, a.attn_out);
}

MatrixRM gather_head_queries(const MatrixRM& layer_queries, int kv_head, int group_size, int head_size, int first,
                             int count) {
  MatrixRM out(static_cast<Eigen::Index>(group_size) * count, head_size);
  for (int j = 0; j < group_size; ++j) {
    const int col = (kv_head * group_size + j) * head_size;
    out.middleRows(static_cast<Eigen::Index>(j) * count, count) = layer_queries.block(first, col, count, head_size);
  }
  return out;
}

// ---- capture ---------------------------------------------------------------------

std::string CaptureOptions::validate() const {
  if (decode_steps < 0) return "decode steps = " + std::to_string(decode_steps) + " is negative";
  if (obs_window < -1) return "observation window = " + std::to_string(obs_window) + " is negative";
  if (prompt.ids.empty() && prompt.generate <= 0) {
    return "the prompt is missing (give token ids, or a number of tokens to generate from BOS)";
  }
  return {};
}

namespace {

// A checkpoint whose finite weights overflow the forward pass is the input at fault, not the
// trace about to be written: names the checkpoint, the head and the first non-finite entry,
// or the head's magnitudes beyond docs/model.md's convention 10.
void check_captured_head(const Llama2cModel& model, const HeadData& hd) {
  const std::string where = "checkpoint '" + model.path() + "': the forward pass ";
  const std::string head = "layer " + std::to_string(hd.layer) + ", KV head " + std::to_string(hd.kv_head);
  const std::pair<const char*, const MatrixRM*> fields[] = {
      {"keys", &hd.keys},           {"keys_pre_rope", &hd.keys_pre_rope}, {"values", &hd.values},
      {"obs_queries", &hd.obs_queries}, {"decode_queries", &hd.decode_queries}, {"decode_keys", &hd.decode_keys},
      {"decode_values", &hd.decode_values}};
  for (const auto& [name, m] : fields)
    for (Eigen::Index r = 0; r < m->rows(); ++r)
      for (Eigen::Index j = 0; j < m->cols(); ++j)
        if (!std::isfinite((*m)(r, j)))
          throw InputError(where + "overflows float32: " + name + " of " + head + " is " +
                           (std::isnan((*m)(r, j)) ? "NaN" : "infinite") + " at row " + std::to_string(r) +
                           ", column " + std::to_string(j) + " (the weights are finite, their products are not).");
  if (const std::string fault = head_magnitude_fault(hd); !fault.empty())
    throw InputError(where + "gives " + head + " beyond tierlab's range: " + fault);
}

}  // namespace

CaptureResult capture(const Llama2cModel& model, const CaptureOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (const std::string p = options.validate(); !p.empty()) throw InputError("capture: " + p + ".");
  const Llama2cConfig& c = model.config();
  const std::vector<std::int32_t> prompt = resolve_prompt(model, options.prompt);
  const int T = static_cast<int>(prompt.size()), S = options.decode_steps;
  if (static_cast<long long>(T) + S > c.seq_len) {
    throw InputError("capture: " + std::to_string(T) + " prompt tokens + " + std::to_string(S) +
                     " decode steps exceed " + model.name() + "'s seq_len = " + std::to_string(c.seq_len) + ".");
  }
  const int W = options.obs_window < 0 ? std::min(kDefaultObsWindow, T) : options.obs_window;
  if (W > T) {
    throw InputError("capture: observation window W = " + std::to_string(W) + " is longer than the prompt (T = " +
                     std::to_string(T) + ").");
  }

  // Forward passes, recording everything (the model is small: L x (T+S) x dim floats).
  ActivationRecorder::Fields fields;
  fields.attention_outputs = options.keep_attention_outputs;
  const auto t_forward = std::chrono::steady_clock::now();
  ActivationRecorder rec(c, T + S, fields);
  Llama2cSession session(model);
  std::vector<std::int32_t> tokens = prompt;
  tokens.reserve(static_cast<std::size_t>(T) + S);
  const float* logits = nullptr;
  for (int pos = 0; pos < T; ++pos) logits = session.forward(prompt[pos], pos, &rec);
  for (int s = 1; s <= S; ++s) {
    tokens.push_back(argmax(logits, c.vocab_size));
    logits = session.forward(tokens.back(), T + s - 1, &rec);
  }
  CaptureResult result;
  result.forward_seconds = seconds_since(t_forward);

  TraceMeta& m = result.meta;
  m.n_layers = c.n_layers;
  m.n_kv_heads = c.n_kv_heads;
  m.group_size = c.group_size();
  m.head_dim = c.head_size();
  m.prompt_len = T;
  m.obs_window = W;
  m.decode_steps = S;
  m.has_pre_rope = true;
  m.rope = llama2c_rope(c);
  m.storage = DType::F32;
  m.token_ids = tokens;
  nlohmann::ordered_json prov = {
      {"source", "captured"},
      {"model", model.name()},
      {"checkpoint", model.path()},
      {"sha256", model.sha256()},
      {"format", "llama2.c"},
      {"config",
       {{"dim", c.dim},
        {"hidden_dim", c.hidden_dim},
        {"n_layers", c.n_layers},
        {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads},
        {"vocab_size", c.vocab_size},
        {"seq_len", c.seq_len},
        {"rope_theta", c.rope_theta}}},
      {"prompt", options.prompt.describe()},
      {"decode", "greedy (full cache)"},
      {"tool", "tierlab capture"}};
  if (options.prompt.ids.empty() && options.prompt.temperature != 0.0f) prov["seed"] = options.prompt.seed;
  m.provenance = prov.dump();

  const int hs = c.head_size(), g = c.group_size();
  result.heads.reserve(static_cast<std::size_t>(c.n_layers) * c.n_kv_heads);
  for (int l = 0; l < c.n_layers; ++l) {
    for (int h = 0; h < c.n_kv_heads; ++h) {
      HeadData hd;
      hd.layer = l;
      hd.kv_head = h;
      hd.group_size = g;
      const int col = h * hs;
      hd.keys = rec.keys(l).block(0, col, T, hs);
      hd.keys_pre_rope = rec.keys_pre_rope(l).block(0, col, T, hs);
      hd.values = rec.values(l).block(0, col, T, hs);
      hd.obs_queries = gather_head_queries(rec.queries(l), h, g, hs, T - W, W);
      hd.decode_queries = gather_head_queries(rec.queries(l), h, g, hs, T, S);
      hd.decode_keys = rec.keys(l).block(T, col, S, hs);
      hd.decode_values = rec.values(l).block(T, col, S, hs);
      check_captured_head(model, hd);
      result.heads.push_back(std::move(hd));
    }
  }
  if (options.keep_attention_outputs) {
    for (int l = 0; l < c.n_layers; ++l) result.attention_outputs.push_back(rec.attention_outputs(l));
  }
  result.seconds = seconds_since(t0);
  return result;
}

void write_trace(const std::string& path, const CaptureResult& result) {
  TraceWriter writer(path, result.meta);
  for (const HeadData& h : result.heads) writer.write_head(h);
  writer.commit();
}

}  // namespace tierlab
