#pragma once
// An allocation: a tier (index into one RateLadder) for every (layer, KV head, token)
// in scope. Files are safetensors: one U8 tensor "layers.{l}.heads.{h}.tiers" [T] per
// head and metadata "tierlab.kind" = "allocation", "tierlab.ladder" = ladder name,
// "n_layers", "n_kv_heads", "prompt_len", and the identity of the trace it was solved for:
// "tierlab.trace_sha256" (SHA-256 of the trace file's bytes), "tierlab.trace_name" (its file
// name) and "tierlab.trace_tokens" (its token ids, comma-separated, when it has them). `eval`
// and `replay` refuse a different trace with a sentence. Writing is atomic.
#include <cstdint>
#include <string>
#include <vector>

#include "model/quantizers/tier.hpp"

namespace tierlab {

struct Allocation {
  RateLadder ladder;
  int n_layers = 0;
  int n_kv_heads = 0;
  int prompt_len = 0;
  std::vector<std::vector<std::uint8_t>> tiers;  // [l * n_kv_heads + h][t]
  // The trace it was solved for (empty in files written before the identity was recorded).
  std::string trace_sha256, trace_name, trace_tokens;

  std::vector<std::uint8_t>& head(int l, int h) { return tiers[l * n_kv_heads + h]; }
  const std::vector<std::uint8_t>& head(int l, int h) const { return tiers[l * n_kv_heads + h]; }
  void validate() const;  // shapes and tier indices; throws InputError
};

void write_allocation(const std::string& path, const Allocation&);

// SHA-256 of a file's bytes as 64 hex digits (memory-mapped; InputError naming the file).
std::string file_sha256(const std::string& path);
// Token ids as "1,15,27" (the allocation's trace_tokens form).
std::string token_list(const std::vector<std::int32_t>& ids);
// Fills the allocation's trace identity from the trace file it was solved for.
void set_trace_identity(Allocation&, const std::string& trace_path, const std::vector<std::int32_t>& token_ids);
// Refuses (InputError, a sentence naming both files) an allocation solved for another trace:
// a different SHA-256 of the bytes. Files without a recorded identity pass (older files).
void check_trace_identity(const Allocation&, const std::string& allocation_path, const std::string& trace_path);
Allocation read_allocation(const std::string& path);  // FormatError names file and tensor

}  // namespace tierlab
