// Strict and hull dominance (dominance.hpp) on hand-made costs.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "model/dominance.hpp"
#include "model/base/error.hpp"

using namespace tierlab;

namespace {

// Hand-made costs for a 2-token head on ladder evict, kivi2, kivi4, kivi8, exact with the
// given per-tier cost sums split as 40% / 60% over the two tokens.
SurrogateCosts hand_costs(const std::vector<double>& sums) {
  SurrogateCosts sc;
  sc.ladder = RateLadder::kivi({2, 4, 8});
  for (const Tier& t : sc.ladder.tiers) sc.rates.push_back(t.nominal_rate(128));
  sc.cost = MatrixRMd::Zero(5, 2);
  for (int i = 0; i < 5; ++i) {
    sc.cost(i, 0) = 0.4 * sums[i];
    sc.cost(i, 1) = 0.6 * sums[i];
  }
  return sc;
}

}  // namespace

TEST_CASE("lower_hull of hand points", "[dominance]") {
  // Points (index: x, y): 0:(2,2) 1:(0,4) 2:(1,2) 3:(1,3) 4:(3,1) 5:(4,0.5).
  // Sorted by x, lowest y per x: 1, 2, 0, 4, 5. (1,2)->(2,2) then (3,1) makes a right
  // turn, so (2,2) goes; (1,2), (3,1), (4,0.5) are collinear (slope -1/2), so (3,1) goes.
  const std::vector<double> x = {2, 0, 1, 1, 3, 4}, y = {2, 4, 2, 3, 1, 0.5};
  CHECK(lower_hull(x, y) == std::vector<int>{1, 2, 5});
  // A convex chain keeps every point.
  CHECK(lower_hull({0, 1, 2, 3}, {9, 4, 1, 0}) == std::vector<int>{0, 1, 2, 3});
  // Non-finite points are ignored.
  CHECK(lower_hull({0, 1, 2}, {1, std::numeric_limits<double>::infinity(), 0}) == std::vector<int>{0, 2});
  CHECK(lower_hull({}, {}).empty());
  CHECK_THROWS_AS(lower_hull({0, 1}, {1}), InputError);
}

TEST_CASE("strict and hull dominance on hand costs", "[dominance]") {
  // sum c(evict) = 10, kivi2 12, kivi4 5, kivi8 4, exact 0
  //   -> R = 1, 1.2, 0.5, 0.4, 0 at code rates 0, 2, 4, 8, 16.
  // kivi2: R >= 1, dominated (and above the hull).
  // kivi4: the chord (0,1)-(16,0) is 0.75 at x = 4 > 0.5, so it is a hull vertex.
  // kivi8: the hull edge (4,0.5)-(16,0) is 0.5 - 4 * 0.5/12 = 0.333 at x = 8 < 0.4:
  //   above the hull although R < 1 (hull-dominated, not strictly dominated).
  const SurrogateCosts sc = hand_costs({10, 12, 5, 4, 0});
  const DominanceReport r = dominance(sc, RateKind::Code);
  REQUIRE(r.R.size() == 5);
  CHECK(r.R[0] == 1.0);
  CHECK(r.R[1] == Approx(1.2));
  CHECK(r.R[2] == Approx(0.5));
  CHECK(r.R[3] == Approx(0.4));
  CHECK(r.R[4] == 0.0);
  CHECK(r.rate == std::vector<double>{0, 2, 4, 8, 16});
  CHECK(r.dominated == std::vector<bool>{false, true, false, false, false});
  CHECK(r.hull_dominated == std::vector<bool>{false, true, false, true, false});

  // With kivi8 at R = 0.3 it sits below that edge (0.333) and is a vertex again.
  const DominanceReport r2 = dominance(hand_costs({10, 12, 5, 3, 0}), RateKind::Code);
  CHECK(r2.hull_dominated == std::vector<bool>{false, true, false, false, false});

  // Total rates 0, 3, 5, 9, 16: kivi8's edge (5,0.5)-(16,0) at 9 is 0.5 - 4*0.5/11 = 0.318 < 0.4.
  const DominanceReport rt = dominance(sc, RateKind::Total);
  CHECK(rt.rate == std::vector<double>{0, 3, 5, 9, 16});
  CHECK(rt.hull_dominated == std::vector<bool>{false, true, false, true, false});

  // R exactly 1 is dominated (spending bits is no better than spending none).
  CHECK(dominance(hand_costs({10, 10, 5, 3, 0}), RateKind::Code).dominated[1]);
  // A point exactly on a hull edge is not above it: kivi4 at 0.75 on the chord (0,1)-(16,0),
  // with kivi8 on the same line at 0.5.
  const DominanceReport on = dominance(hand_costs({10, 12, 7.5, 5, 0}), RateKind::Code);
  CHECK(on.hull_dominated == std::vector<bool>{false, true, false, false, false});
  // Free eviction: every tier that costs anything is infinitely worse.
  const DominanceReport fr = dominance(hand_costs({0, 1, 1, 1, 0}), RateKind::Code);
  CHECK(std::isinf(fr.R[2]));
  CHECK(fr.dominated[2]);
  CHECK(fr.hull_dominated[2]);
}

TEST_CASE("dominated share counts heads whose 2-bit tier is dominated", "[dominance]") {
  const RateLadder ladder = RateLadder::kivi({2, 4, 8});
  std::vector<DominanceReport> heads = {
      dominance(hand_costs({10, 12, 5, 4, 0}), RateKind::Code),   // kivi2 R 1.2: dominated
      dominance(hand_costs({10, 8, 5, 4, 0}), RateKind::Code),    // 0.8
      dominance(hand_costs({10, 10, 5, 4, 0}), RateKind::Code),   // 1.0: dominated
      dominance(hand_costs({10, 2, 0.5, 0.1, 0}), RateKind::Code) // 0.2
  };
  CHECK(dominated_share(heads, ladder) == 0.5);
  CHECK(dominated_share(heads, ladder, 4) == 0.0);
  CHECK_THROWS_AS(dominated_share(heads, ladder, 3), InputError);
  CHECK_THROWS_AS(dominated_share({}, ladder), InputError);
  CHECK_THROWS_AS(dominated_share(heads, RateLadder::kivi({2, 4})), InputError);
}
