// The key-quantizer registry (model/quantizers/key_quantizer.hpp): every entry declares its parameters
// and defaults once, and the factories use exactly those defaults.
#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>
#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/synthetic/synthetic.hpp"

using namespace tierlab;

namespace {

std::string error_of_make(const std::string& name, const KeyQuantizerParams& params) {
  try {
    make_key_quantizer(name, params);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A prefix parameter ("base.*") and the entry whose parameters it expands to.
bool is_prefix(const KeyQuantizerParam& p) { return p.name.size() > 2 && p.name.substr(p.name.size() - 2) == ".*"; }

}  // namespace

TEST_CASE("The registry's names are unique and every entry has a summary, a source and a factory", "[key_quantizer]") {
  std::set<std::string> names;
  for (const KeyQuantizerEntry& e : key_quantizer_registry()) {
    INFO(e.info.name);
    CHECK(names.insert(e.info.name).second);
    CHECK_FALSE(e.info.summary.empty());
    CHECK_FALSE(e.info.source.empty());
    CHECK(e.make != nullptr);
    std::set<std::string> params;
    for (const KeyQuantizerParam& p : e.info.params) {
      CHECK(params.insert(p.name).second);
      CHECK_FALSE(p.help.empty());
    }
  }
  CHECK(names == std::set<std::string>{"kivi", "token", "quarot", "kvquant", "turboquant", "kvcobra", "headq",
                                       "rdkv-channel"});
}

TEST_CASE("Every registered quantizer made with no parameters reports exactly its declared defaults",
          "[key_quantizer]") {
  for (const KeyQuantizerEntry& e : key_quantizer_registry()) {
    INFO(e.info.name);
    const auto q = make_key_quantizer(e.info.name);
    CHECK(q->name() == e.info.name);
    const KeyQuantizerParams eff = q->parameters();
    KeyQuantizerParams expected;
    for (const KeyQuantizerParam& p : e.info.params) {
      if (!is_prefix(p)) {
        expected[p.name] = p.default_value;
        continue;
      }
      // "base.*": the base quantizer's own declared defaults, under the prefix.
      const std::string prefix = p.name.substr(0, p.name.size() - 1);
      const KeyQuantizerParam* base = e.param(prefix.substr(0, prefix.size() - 1));
      REQUIRE(base != nullptr);
      for (const KeyQuantizerParam& bp : key_quantizer_entry(base->default_value).info.params)
        expected[prefix + bp.name] = bp.default_value;
    }
    CHECK(eff == expected);
    // The entry's factory is what make_key_quantizer calls.
    CHECK(e.make({})->parameters() == eff);
  }
}

TEST_CASE("An unknown parameter is rejected with a message that lists the declared parameter names",
          "[key_quantizer]") {
  for (const KeyQuantizerEntry& e : key_quantizer_registry()) {
    INFO(e.info.name);
    const std::string msg = error_of_make(e.info.name, {{"no_such_parameter", "1"}});
    CHECK_THAT(msg, Catch::Contains("unknown parameter 'no_such_parameter'"));
    for (const KeyQuantizerParam& p : e.info.params) CHECK_THAT(msg, Catch::Contains(p.name));
  }
}

TEST_CASE("An unknown quantizer name is rejected with the list of registered names", "[key_quantizer]") {
  std::string list;
  for (const KeyQuantizerEntry& e : key_quantizer_registry()) list += (list.empty() ? "" : ", ") + e.info.name;
  CHECK(error_of_make("nope", {}) == "Unknown key quantizer 'nope'; valid names are " + list + ".");
  CHECK_THROWS_AS(key_quantizer_entry("nope"), InputError);
}

TEST_CASE("A declared default that does not parse or is out of range is a programming error naming it",
          "[key_quantizer]") {
  const auto entry_with = [](const std::string& def, std::vector<std::string> choices = {}) {
    KeyQuantizerEntry e;
    e.info.name = "broken";
    e.info.params = {{"p", def, "a test parameter", std::move(choices)}};
    return e;
  };
  const auto logic_error_of = [](auto&& read) -> std::string {
    try {
      read();
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "";
  };
  const KeyQuantizerEntry not_int = entry_with("two");
  const std::string m1 = logic_error_of([&] { ParamReader(not_int, {}).get_int("p", 0, 10); });
  CHECK_THAT(m1, Catch::Contains("'broken'") && Catch::Contains("parameter p") && Catch::Contains("'two'"));
  const KeyQuantizerEntry out_of_range = entry_with("11");
  CHECK_THAT(logic_error_of([&] { ParamReader(out_of_range, {}).get_int("p", 0, 10); }), Catch::Contains("parameter p"));
  CHECK_THAT(logic_error_of([&] { ParamReader(not_int, {}).get_double("p", 0, 10); }), Catch::Contains("parameter p"));
  CHECK_THAT(logic_error_of([&] { ParamReader(not_int, {}).get_seed("p"); }), Catch::Contains("parameter p"));
  const KeyQuantizerEntry not_a_choice = entry_with("c", {"a", "b"});
  CHECK_THAT(logic_error_of([&] { ParamReader(not_a_choice, {}).get_string("p"); }), Catch::Contains("parameter p"));
  // A given value that is wrong is the user's error, not the entry's.
  CHECK_THROWS_AS(ParamReader(out_of_range, {{"p", "12"}}).get_int("p", 0, 10), InputError);
  CHECK(ParamReader(out_of_range, {{"p", "3"}}).get_int("p", 0, 10) == 3);
  // Reading an undeclared key, or never reading a declared one, is also the entry's error.
  const KeyQuantizerEntry fine = entry_with("1");
  CHECK_THAT(logic_error_of([&] { ParamReader(fine, {}).get_int("q", 0, 10); }), Catch::Contains("parameter q"));
  CHECK_THAT(logic_error_of([&] { ParamReader(fine, {}).finish(); }), Catch::Contains("parameter p"));
}

TEST_CASE("The special defaults keep their meaning: token group 0 is d, turboquant -1 splits the fraction, "
          "rdkv-channel's empty eps is the paper's",
          "[key_quantizer]") {
  const SynthParams p = synth_preset("tiny");
  const HeadData h = synth_head(p, 0, 0);
  const TraceMeta m = synth_meta(p);
  const int d = static_cast<int>(h.keys.cols());
  const auto keys_of = [&](const std::string& name, const KeyQuantizerParams& params) {
    return make_key_quantizer(name, params)->quantize(h, m.rope).keys;
  };
  CHECK(keys_of("token", {}) == keys_of("token", {{"group", std::to_string(d)}}));
  CHECK(keys_of("turboquant", {{"bits", "2.5"}}) ==
        keys_of("turboquant", {{"bits", "2.5"}, {"high_channels", std::to_string(turboquant_split(2.5, d).n_high)}}));
  CHECK(keys_of("rdkv-channel", {}) == keys_of("rdkv-channel", {{"eps", "1,0.0955,0.00402,1.4e-05,0"}}));
}
