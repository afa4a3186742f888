// Tiers: names, parsing, nominal rates (tier.hpp) and the rate ladder.
#include <catch2/catch.hpp>

#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/tier.hpp"

using namespace tierlab;

TEST_CASE("quantizer and rate kinds round-trip through their names", "[tier]") {
  for (auto k : {QuantizerKind::Evict, QuantizerKind::Exact, QuantizerKind::KiviPerChannel, QuantizerKind::PerToken})
    CHECK(parse_quantizer_kind(to_string(k)) == k);
  CHECK(to_string(QuantizerKind::KiviPerChannel) == "kivi");
  CHECK(to_string(QuantizerKind::PerToken) == "token");
  CHECK(parse_rate_kind("code") == RateKind::Code);
  CHECK(parse_rate_kind("total") == RateKind::Total);
  CHECK(to_string(RateKind::Total) == "total");
  CHECK_THROWS_WITH(parse_quantizer_kind("kvquant"), Catch::Contains("evict, exact, kivi, token"));
  CHECK_THROWS_WITH(parse_rate_kind("bits"), Catch::Contains("code, total"));
}

TEST_CASE("tier names follow the documented forms", "[tier]") {
  CHECK(Tier::parse("evict") == Tier{QuantizerKind::Evict, 0, 0});
  CHECK(Tier::parse("exact") == Tier{QuantizerKind::Exact, 16, 0});
  CHECK(Tier::parse("kivi2") == Tier{QuantizerKind::KiviPerChannel, 2, 32});
  CHECK(Tier::parse("kivi4g64") == Tier{QuantizerKind::KiviPerChannel, 4, 64});
  CHECK(Tier::parse("token4") == Tier{QuantizerKind::PerToken, 4, 0});
  CHECK(Tier::parse("token3g64") == Tier{QuantizerKind::PerToken, 3, 64});
  for (const char* n : {"evict", "exact", "kivi2", "kivi8", "kivi4g64", "kivi2g16", "token4", "token2g32"})
    CHECK(Tier::parse(n).name() == n);
  // G = 32 is the default and is not written; group 0 on a KIVI tier means the default.
  CHECK(Tier{QuantizerKind::KiviPerChannel, 2, 32}.name() == "kivi2");
  CHECK(Tier{QuantizerKind::KiviPerChannel, 2, 0}.name() == "kivi2");
}

TEST_CASE("bad tier names are rejected with the valid forms", "[tier]") {
  for (const char* n : {"", "kivi", "kivi0", "kivi16", "kivi2g", "kivi2g0", "kivi2x", "token", "headq4", "Exact"})
    CHECK_THROWS_AS(Tier::parse(n), InputError);
  CHECK_THROWS_WITH(Tier::parse("kivi2x"), Catch::Contains("evict, exact, kivi<b>[g<G>]"));
}

TEST_CASE("nominal rates: code bits b, total b + 32/G (KIVI) or b + 32 ceil(d/n)/d (per token)", "[tier]") {
  const int d = 128;
  auto check = [&](const char* name, double code, double total) {
    INFO(name);
    const Rate r = Tier::parse(name).nominal_rate(d);
    CHECK(r.code_bits == Approx(code));
    CHECK(r.total_bits == Approx(total));
  };
  check("evict", 0, 0);
  check("exact", 16, 16);
  check("kivi2", 2, 3);         // 2 + 32/32
  check("kivi4g64", 4, 4.5);    // 4 + 32/64
  check("kivi8g128", 8, 8.25);  // 8 + 32/128
  check("token4", 4, 4.25);     // one group of d = 128 channels: 4 + 32/128
  check("token4g64", 4, 4.5);   // two groups of 64
  check("token2g48", 2, 2.75);  // 128 = 48 + 48 + 32: three groups, 2 + 96/128
  CHECK(rate_of(Rate{2, 3}, RateKind::Code) == 2);
  CHECK(rate_of(Rate{2, 3}, RateKind::Total) == 3);
}

TEST_CASE("rate ladders parse, name and validate", "[tier]") {
  const RateLadder a = RateLadder::parse("kivi2,kivi4");
  CHECK(a.name() == "evict,kivi2,kivi4,exact");
  CHECK(a.size() == 4);
  CHECK(a.exact_index() == 3);
  CHECK(RateLadder::parse("evict, kivi2 ,kivi4,exact").name() == "evict,kivi2,kivi4,exact");
  CHECK(RateLadder::parse("").name() == "evict,exact");
  CHECK(RateLadder::parse("kivi2,token4g64").name() == "evict,kivi2,token4g64,exact");
  CHECK(RateLadder::kivi().name() == "evict,kivi2,kivi4,kivi8,exact");
  CHECK(RateLadder::kivi({2, 4}, 64).name() == "evict,kivi2g64,kivi4g64,exact");

  CHECK_THROWS_WITH(RateLadder::parse("kivi4,kivi2"), Catch::Contains("strictly increase"));
  CHECK_THROWS_WITH(RateLadder::parse("kivi2,token2"), Catch::Contains("strictly increase"));
  CHECK_THROWS_AS(RateLadder::parse("kivi2,exact,kivi4"), InputError);
  CHECK_THROWS_AS(RateLadder::parse("kivi2,evict"), InputError);
  CHECK_THROWS_AS(RateLadder::parse("kivi2,,kivi4"), InputError);
  CHECK_THROWS_AS(RateLadder::parse("kivi2,"), InputError);
  CHECK_THROWS_AS(RateLadder::kivi({4, 2}), InputError);

  RateLadder bad;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("at least evict and exact"));
  bad.tiers = {Tier::parse("kivi2"), Tier::parse("exact")};
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("tier 0 must be evict"));
  bad.tiers = {Tier::parse("evict"), Tier::parse("kivi2")};
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("last tier must be exact"));
  bad.tiers = {Tier::parse("evict"), Tier{QuantizerKind::Exact, 8, 0}};
  CHECK_THROWS_AS(bad.validate(), InputError);
  bad.tiers = {Tier::parse("evict"), Tier{QuantizerKind::KiviPerChannel, 2, -1}, Tier::parse("exact")};
  CHECK_THROWS_AS(bad.validate(), InputError);
}
