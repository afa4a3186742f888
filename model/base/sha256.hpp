#pragma once
// SHA-256 (FIPS 180-4): the digest that names a model checkpoint and a trace file
// (allocation metadata, capture provenance).
#include <cstddef>
#include <string>

namespace tierlab {

// SHA-256 of a byte buffer, as 64 lowercase hex digits.
std::string sha256_hex(const void* data, std::size_t size);

}  // namespace tierlab
