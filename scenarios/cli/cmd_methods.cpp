// tierlab methods [--json] [--kind quantizer|scorer|allocator|policy|solver]
// Lists the catalogue of methods (scenarios/methods/catalogue.hpp): every key quantizer, eviction
// scorer, seed allocator, uniform policy and solver with its parameters, their defaults, and the
// source it follows (docs/methods.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/cli/commands.hpp"
#include "scenarios/methods/catalogue.hpp"

namespace tierlab::cli {

void add_methods(CLI::App& app) {
  struct Args {
    bool json = false;
    std::string kind = "all";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "methods", "List key quantizers, eviction scorers, seed allocators, uniform policies and solvers");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_option("--kind", args->kind, "all | quantizer | scorer | allocator | policy | solver")->capture_default_str();
  cmd->callback([args]() {
    const std::vector<CatalogueEntry> all = method_catalogue(args->kind, "methods: --kind");
    if (args->json) {
      nlohmann::json j = nlohmann::json::array();
      for (const CatalogueEntry& e : all) j.push_back(to_json(e));
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::string last_kind;
    for (const CatalogueEntry& e : all) {
      const MethodInfo& m = e.info;
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
    std::printf("\nParameters are name=value strings (make_key_quantizer, make_scorer, allocate_seed, allocate_kvcobra); scorer budgets are ratio:R or count:N;\nevaluate a seed allocator with `tierlab eval TRACE --seed NAME --budget B [--param k=v]`; a solver with `tierlab solve TRACE --budget B --solver NAME`.\n");
  });
}

}  // namespace tierlab::cli
