// tierlab methods [--json] [--kind quantizer|scorer|allocator|policy]
// Lists every key quantizer, eviction scorer, seed allocator and uniform policy with its parameters,
// their defaults, and the source it follows (model/key_quantizer.hpp, solvers/scorers.hpp,
// seed_allocators.hpp, kvcobra_allocator.hpp, policy.hpp; docs/methods.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/error.hpp"
#include "model/key_quantizer.hpp"
#include "scenarios/cli/commands.hpp"
#include "solvers/scorers.hpp"
#include "solvers/kvcobra_allocator.hpp"
#include "solvers/seed_allocators.hpp"

namespace tierlab::cli {
namespace {

// From the registry itself: each parameter's declared default, its meaning and its choices.
std::vector<MethodInfo> key_quantizers() {
  std::vector<MethodInfo> out;
  for (const KeyQuantizerEntry& q : key_quantizer_registry()) {
    MethodInfo m{q.name, "key quantizer", q.summary, q.source, {}};
    for (const KeyQuantizerParam& p : q.params) {
      std::string help = p.meaning;
      for (std::size_t i = 0; i < p.choices.size(); ++i) help += (i == 0 ? "; one of " : " | ") + p.choices[i];
      m.params.push_back({p.name, p.default_value, help});
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<MethodInfo> uniform_policies() {
  return {
      {"exact", "uniform policy", "every token at the exact tier (the reference)", "tierlab (solvers/policy.hpp)", {}},
      {"kivi:B[:gG][:rR]", "uniform policy",
       "KIVI per-channel B-bit keys in groups of G tokens; the last T mod R tokens full precision",
       "arXiv 2402.02750, jy-yuan/KIVI",
       {{"B", "", "code bits"}, {"G", "32", "tokens per group"}, {"R", "128", "residual window (r0 = none)"}}},
      {"token:B[:gN]", "uniform policy", "per-token B-bit keys in groups of N channels", "tierlab (solvers/policy.hpp)",
       {{"B", "", "code bits"}, {"N", "d", "channels per group"}}},
      {"evict:KEEP", "uniform policy", "keep the fraction KEEP of tokens with the largest c_t(0), evict the rest",
       "tierlab (solvers/policy.hpp)", {{"KEEP", "", "kept fraction in (0, 1]"}}}};
}

}  // namespace

void add_methods(CLI::App& app) {
  struct Args {
    bool json = false;
    std::string kind = "all";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("methods", "List key quantizers, eviction scorers, seed allocators and uniform policies");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_option("--kind", args->kind, "all | quantizer | scorer | allocator | policy")->capture_default_str();
  cmd->callback([args]() {
    std::vector<MethodInfo> all;
    const std::string& k = args->kind;
    if (k != "all" && k != "quantizer" && k != "scorer" && k != "allocator" && k != "policy")
      throw InputError("methods: --kind '" + k + "' is not all, quantizer, scorer, allocator or policy");
    if (k == "all" || k == "quantizer")
      for (const auto& m : key_quantizers()) all.push_back(m);
    if (k == "all" || k == "scorer")
      for (const auto& m : eviction_scorer_methods()) all.push_back(m);
    if (k == "all" || k == "allocator") {
      for (const auto& m : seed_allocator_methods()) all.push_back(m);
      all.push_back(kvcobra_allocator_method());  // per-head (rank, bits); `tierlab eval --seed kvcobra`
    }
    if (k == "all" || k == "policy")
      for (const auto& m : uniform_policies()) all.push_back(m);
    if (args->json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& m : all) {
        nlohmann::json params = nlohmann::json::array();
        for (const auto& p : m.params)
          params.push_back({{"name", p.name}, {"default", p.default_value}, {"help", p.help}});
        j.push_back({{"name", m.name}, {"kind", m.kind}, {"summary", m.summary}, {"source", m.source}, {"params", params}});
      }
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::string last_kind;
    for (const auto& m : all) {
      if (m.kind != last_kind) {
        // "uniform policy" -> "uniform policies", "key quantizer" -> "key quantizers".
        const std::string plural = m.kind.size() > 1 && m.kind.back() == 'y' && m.kind[m.kind.size() - 2] != 'e'
                                       ? m.kind.substr(0, m.kind.size() - 1) + "ies"
                                       : m.kind + "s";
        std::printf("%s%s:\n", last_kind.empty() ? "" : "\n", plural.c_str());
      }
      last_kind = m.kind;
      std::printf("  %-18s %s\n", m.name.c_str(), m.summary.c_str());
      std::printf("  %-18s source: %s\n", "", m.source.c_str());
      for (const auto& p : m.params)
        std::printf("  %-18s   %s = %s%s%s%s\n", "", p.name.c_str(), p.default_value.empty() ? "-" : p.default_value.c_str(),
                    p.help.empty() ? "" : "  (", p.help.c_str(), p.help.empty() ? "" : ")");
    }
    std::printf("\nParameters are name=value strings (make_key_quantizer, make_scorer, allocate_seed, allocate_kvcobra); scorer budgets are ratio:R or count:N;\nevaluate a seed allocator with `tierlab eval TRACE --seed NAME --budget B [--param k=v]`.\n");
  });
}

}  // namespace tierlab::cli
