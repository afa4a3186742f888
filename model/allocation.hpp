#pragma once
// An allocation: a tier (index into one RateLadder) for every (layer, KV head, token)
// in scope. Files are safetensors: one U8 tensor "layers.{l}.heads.{h}.tiers" [T] per
// head and metadata "tierlab.kind" = "allocation", "tierlab.ladder" = ladder name,
// "n_layers", "n_kv_heads", "prompt_len". Writing is atomic.
#include <cstdint>
#include <string>
#include <vector>

#include "model/tier.hpp"

namespace tierlab {

struct Allocation {
  RateLadder ladder;
  int n_layers = 0;
  int n_kv_heads = 0;
  int prompt_len = 0;
  std::vector<std::vector<std::uint8_t>> tiers;  // [l * n_kv_heads + h][t]

  std::vector<std::uint8_t>& head(int l, int h) { return tiers[l * n_kv_heads + h]; }
  const std::vector<std::uint8_t>& head(int l, int h) const { return tiers[l * n_kv_heads + h]; }
  void validate() const;  // shapes and tier indices; throws InputError
};

void write_allocation(const std::string& path, const Allocation&);
Allocation read_allocation(const std::string& path);  // FormatError names file and tensor

}  // namespace tierlab
