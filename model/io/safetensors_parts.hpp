#pragma once
// Shared by model/io/safetensors.cpp (reading) and model/io/safetensors_write.cpp (writing); not
// part of the API.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tierlab::safetensors_detail {

// "[2, 3]".
std::string shape_string(const std::vector<std::int64_t>& shape);
// numel x element size, or false on overflow of 64 bits.
bool checked_bytes(const std::vector<std::int64_t>& shape, std::size_t elem, std::uint64_t& out);
// strerror(errno).
std::string errno_text();

}  // namespace tierlab::safetensors_detail
