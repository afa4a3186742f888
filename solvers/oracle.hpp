#pragma once
// Exhaustive oracle for small shared-ladder knapsacks (mckp.hpp), used by the tests.
//
// A shortest path in a layered DAG (Boost.Graph dag_shortest_paths): vertex (i, u) means
// "items 0..i-1 decided, u rate units used" (i = 0..N, u = 0..K with K the capacity in
// rate units, mckp.hpp); an edge (i, u) -> (i+1, u + units_j) of weight c_ij for every
// tier j that fits. The optimum is the shortest path from (0, 0) to any (N, u):
//   min over all paths = min_{x : sum units <= K} sum_i c_{i,x_i}
// exactly (every allocation is a path and every path an allocation). It needs rates on
// the 1/64-bit grid and (N + 1)(K + 1) <= max_vertices (InputError otherwise). Status is
// Optimal (gap 0) or Infeasible.
#include <cstdint>

#include "solvers/mckp.hpp"

namespace tierlab {

struct OracleOptions {
  std::int64_t max_vertices = 4'000'000;
};

MckpResult solve_oracle(const MckpInstance&, const OracleOptions& = {});

}  // namespace tierlab
