#pragma once
// A trace: what attention saw for every layer l and KV head h (docs/model.md section 7).
// Stored as one safetensors file (docs/trace-format.md). Tensor names, per head:
//   layers.{l}.heads.{h}.keys            [T, d]    post-RoPE keys k_t
//   layers.{l}.heads.{h}.keys_pre_rope   [T, d]    optional, pre-RoPE keys
//   layers.{l}.heads.{h}.values          [T, d]    values v_t
//   layers.{l}.heads.{h}.obs_queries     [g, W, d] observation queries (last W prompt positions)
//   layers.{l}.heads.{h}.decode_queries  [g, S, d] decode-step queries q_s, s = 1..S
//   layers.{l}.heads.{h}.decode_keys     [S, d]    key appended at each decode step (post-RoPE)
//   layers.{l}.heads.{h}.decode_values   [S, d]    value appended at each decode step
//   token_ids                            [T + S]   I32, optional
// and the metadata (all values strings, as safetensors requires) listed in TraceMeta:
// "tierlab.format" = "trace-v1", n_layers, n_kv_heads, group_size, head_dim, prompt_len,
// obs_window, decode_steps, has_pre_rope ("true"/"false"), storage_dtype, rope_theta,
// rope_dim, rope_style, provenance (JSON text), spans (JSON {"l.h": [[b, e], ...]}).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/io/safetensors.hpp"

namespace tierlab {

// RoPE as applied to the keys: pairs are rotated by angle pos / theta^(2i/rotary_dim).
// style "interleaved" rotates (2i, 2i+1) (llama2.c, Meta); "half" rotates (i, i + d/2)
// (Hugging Face transformers).
struct RopeParams {
  double theta = 10000.0;
  int rotary_dim = 0;  // 0 means the whole head dim
  std::string style = "interleaved";
};

// A planted multi-token span [begin, end) of prompt positions (synthetic retrieval heads).
struct Span {
  std::int32_t begin = 0;
  std::int32_t end = 0;
};

struct TraceMeta {
  int n_layers = 0;
  int n_kv_heads = 0;
  int group_size = 1;    // g: query heads per KV head (GQA)
  int head_dim = 0;      // d
  int prompt_len = 0;    // T: cached prompt positions
  int obs_window = 0;    // W: observation queries per query head
  int decode_steps = 0;  // S
  bool has_pre_rope = false;
  RopeParams rope;
  DType storage = DType::F32;  // dtype of the float tensors
  std::string provenance;      // JSON text: source ("synthetic"/"captured"), model, preset, seed, ...
  // Spans per head, indexed [l * n_kv_heads + h]; empty when the trace has none.
  std::vector<std::vector<Span>> spans;
  std::vector<std::int32_t> token_ids;  // T + S ids, or empty

  int n_heads() const { return n_layers * n_kv_heads; }
};

// One KV head of one layer, in memory as float32.
struct HeadData {
  int layer = 0;
  int kv_head = 0;
  MatrixRM keys;            // T x d
  MatrixRM keys_pre_rope;   // T x d, or 0 x 0 when the trace has none
  MatrixRM values;          // T x d
  MatrixRM obs_queries;     // (g * W) x d, row = query_head * W + i
  MatrixRM decode_queries;  // (g * S) x d, row = query_head * S + (s - 1)
  MatrixRM decode_keys;     // S x d
  MatrixRM decode_values;   // S x d
  std::vector<Span> spans;
  // The layout of obs_queries, for their causal mask (docs/model.md section 12, convention 4): g query heads of
  // W rows each, observation query i at prompt position obs_first_position + i (-1: the
  // trace convention T - W, the last W prompt positions). Set by every reader.
  int group_size = 1;
  int obs_first_position = -1;
};

// A query set with its causal limits (docs/model.md section 12, convention 4, "every query is causal"): row r
// attends to the tokens 0 .. visible[r] - 1 only. Every surrogate, scorer and recomputation
// of a head takes its queries as a CausalQueries, so none can forget the mask.
struct CausalQueries {
  const MatrixRM* rows = nullptr;  // not owned
  std::vector<int> visible;        // one limit per row, 1 <= visible[r] <= T
  const MatrixRM& queries() const { return *rows; }
};

// The head's observation queries: row j W + i (query head j, window row i, at position
// p_i = obs_first_position + i) sees min(T, p_i + 1) prompt tokens. InputError naming the
// head when the rows do not split into group_size heads, or a position is negative.
CausalQueries observation_queries(const HeadData& head);
// The same with an explicit group size g (a scorer's group_size parameter).
CausalQueries observation_queries(const HeadData& head, int group_size);
// Queries that see all `tokens` tokens (decode queries against the prompt: every decode step
// comes after the whole prompt; arrays a user built without positions).
CausalQueries all_visible(const MatrixRM& queries, Eigen::Index tokens);

// A head's decode queries addressed by (query head j, decode step s) rather than by row: query
// head j's query at step s (0 <= j < g, 1 <= s <= S) is row j S + (s - 1) of
// HeadData::decode_queries, and it attends to the T prompt tokens and the s appended ones
// (docs/model.md section 12, convention 4). Every reader and writer of those rows goes
// through this type.
struct DecodeQueries {
  const MatrixRM* rows = nullptr;  // HeadData::decode_queries, not owned
  int g = 0, S = 0, T = 0;
  static Eigen::Index row_of(int j, int s, int S) { return static_cast<Eigen::Index>(j) * S + (s - 1); }
  Eigen::Index row(int j, int s) const { return row_of(j, s, S); }
  auto query(int j, int s) const { return rows->row(row(j, s)); }
  // The g queries of step s, query heads in order (g x d).
  MatrixRM step(int s) const;
  // Every row's causal limit over the T + S tokens: T + s.
  std::vector<int> visible() const;
};
// The head's decode queries (S = decode_keys.rows(), g = decode_queries.rows() / S; g = 0 when
// the head has no decode steps).
DecodeQueries decode_query_set(const HeadData& head);

// The first problem with a meta's values as a phrase ("rope_dim = 3 is odd (RoPE rotates
// pairs)"), or "": what every reader and writer of a trace checks (counts and lengths in range,
// obs_window <= prompt_len, rope_dim even and <= head_dim, rope_theta positive and finite,
// rope_style, storage dtype, spans within the prompt, token_ids' length, provenance JSON).
// tierlab.Head checks the heads a user builds with it.
std::string trace_meta_problem(const TraceMeta& meta);

// Reads a trace one head at a time through the memory map. The constructor checks
// the metadata and that every expected tensor exists with the right shape and dtype;
// head() converts and checks the values (NaN/Inf -> FormatError with the index).
// A file truncated, rewritten, replaced or removed while a reader has it open would make a
// read of the map fault (SIGBUS): head() first checks that the path still names the file it
// opened, unchanged (check_unchanged; the race that remains is stated in trace.cpp).
//
// A reader can also be over heads computed on demand (HeadGenerator) instead of a file: a
// synthetic cell of a scenario run reads its heads this way (model/synthetic/synthetic.hpp,
// synthetic_trace), so no temporary file is written. generate(layer, kv_head) must return
// the head as a file of that meta would hold it (values already in the storage dtype);
// head() then checks it as it checks a file's heads. path() is the name given; file() throws.
using HeadGenerator = std::function<HeadData(int layer, int kv_head)>;

class TraceReader {
 public:
  explicit TraceReader(const std::string& path);
  TraceReader(TraceMeta meta, std::string name, HeadGenerator generate);
  const TraceMeta& meta() const { return meta_; }
  const std::string& path() const;
  HeadData head(int layer, int kv_head) const;
  bool generated() const { return !file_; }
  const SafetensorsFile& file() const;
  // InputError naming the file and what changed (removed or renamed, replaced by another file,
  // size, modification time) when the path no longer names the file as it was opened. Callers
  // that read the map themselves (the Python module's views) call it before each read.
  void check_unchanged() const;

 private:
  // What stat() said of the path when it was opened: its identity, size and modification time.
  struct FileStamp {
    std::uint64_t device = 0, inode = 0;
    std::int64_t size = 0, mtime_sec = 0, mtime_nsec = 0;
  };
  HeadData generated_head(int layer, int kv_head) const;

  std::unique_ptr<SafetensorsFile> file_;  // null: generated
  TraceMeta meta_;
  FileStamp opened_;
  std::string name_;        // generated: the name path() gives
  HeadGenerator generate_;  // generated: the heads
};

// Writes a trace head by head (in order l = 0.., h = 0..), atomically.
class TraceWriter {
 public:
  TraceWriter(std::string path, TraceMeta meta);
  void write_head(const HeadData& head);  // checks shapes against the meta
  void commit();                          // all heads must have been written

 private:
  std::string path_;  // for error messages
  TraceMeta meta_;
  std::unique_ptr<SafetensorsWriter> writer_;
  int next_ = 0;
};

std::string head_tensor_name(int layer, int kv_head, const std::string& field);

}  // namespace tierlab
