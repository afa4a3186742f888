// tierlab demo: the main job on the embedded defaults. Generates a synthetic trace,
// reports its dominance structure (surrogate) and evaluates a few uniform policies with
// the exact recomputation, next to the surrogate's predictions.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "model/dominance.hpp"
#include "model/base/error.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/usage.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/run/progress.hpp"
#include "scenarios/pipeline/report.hpp"
#include "solvers/policy.hpp"
#include "solvers/problem.hpp"

namespace tierlab::cli {

void add_demo(CLI::App& app) {
  struct Args {
    std::string preset = "llama-like", out = "out/demo", backend = "auto";
    std::uint64_t seed = 0;
    int tokens = -1;
    std::vector<double> budgets{2.0, 4.0};
    std::vector<std::string> policies{"kivi:2", "kivi:4", "token:2", "token:4", "evict:0.125", "evict:0.25"};
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("demo", "A quick tour on the embedded defaults (synthetic trace -> model -> exact recomputation); the main job is `tierlab run`");
  cmd->add_option("--preset", args->preset, "Synthetic preset")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed")->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "Prompt tokens (default: the preset's)")->check(at_least(1));
  cmd->add_option("--out", args->out, "Output folder (trace and summary.json)")->capture_default_str();
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda")->capture_default_str();
  cmd->add_option("--policy", args->policies, "Policies to evaluate (repeatable)")->capture_default_str();
  cmd->add_option("--budget", args->budgets,
                  "Budgets for the interior advantage, in total key bits per element (codes and metadata: equal memory), "
                  "each in [0.01, 16]")
      ->check(CLI::Range(0.01, 16.0))
      ->capture_default_str();
  cmd->callback([args]() {
    SynthParams p = synth_preset(args->preset);
    p.seed = args->seed;
    if (args->tokens > 0) p.prompt_len = args->tokens;
    p.validate();
    std::filesystem::create_directories(args->out);
    const std::string trace_path = args->out + "/" + p.preset + ".safetensors";
    {
      TerminalProgress bar("synth");
      write_synthetic_trace(p, trace_path, [&](int d, int t) { bar.update(d, t); });
    }
    TraceReader trace(trace_path);
    const TraceMeta& m = trace.meta();
    std::printf("== tierlab demo ==\n");
    std::printf("trace %s: preset %s seed %llu, %d layers x %d KV heads (g=%d), d=%d, T=%d, W=%d, S=%d\n\n",
                trace_path.c_str(), p.preset.c_str(), static_cast<unsigned long long>(p.seed), m.n_layers,
                m.n_kv_heads, m.group_size, m.head_dim, m.prompt_len, m.obs_window, m.decode_steps);

    // Dominance structure of the KIVI ladder (surrogate, observation queries).
    const RateLadder ladder = RateLadder::kivi({2, 4, 8}, 32);
    std::vector<DominanceReport> reports;
    double beta_sum = 0;
    int beta_n = 0;
    std::printf("dominance of KIVI tiers per head (R_h(tau) = sum c_t(tau) / sum c_t(0); >= 1 means dominated)\n");
    std::printf("head      R(kivi2)   R(kivi4)   R(kivi8)  hull-dominated       beta\n");
    for (int l = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h) {
        const HeadData head = trace.head(l, h);
        const SurrogateCosts costs = surrogate_costs(head, m.rope, observation_queries(head), ladder);
        const DominanceReport rep = dominance(costs, RateKind::Code);
        const HeadNoiseModel fit = fit_head_noise(costs, ladder_rates(head, m.rope, ladder, RateKind::Code));
        if (fit.fitted) beta_sum += fit.beta, ++beta_n;
        std::string hull;
        for (int i = 1; i + 1 < ladder.size(); ++i)
          if (rep.hull_dominated[static_cast<std::size_t>(i)]) hull += ladder.tiers[static_cast<std::size_t>(i)].name() + " ";
        std::printf("L%d.H%d  %9.3g  %9.3g  %9.3g  %-16s %8.3g\n", l, h, rep.R[1], rep.R[2], rep.R[3],
                    hull.empty() ? "-" : hull.c_str(), fit.fitted ? fit.beta : std::nan(""));
        reports.push_back(rep);
      }
    const double share = dominated_share(reports, ladder, 2);
    std::printf("dominated share (2-bit tier dominated): %.3f of %zu heads; mean fitted beta %.3g\n\n", share,
                reports.size(), beta_n ? beta_sum / beta_n : 0.0);

    auto backend = backend_or_throw(args->backend);
    nlohmann::json summary = {{"trace", trace_path},
                              {"preset", p.preset},
                              {"seed", p.seed},
                              {"backend", backend->description()},
                              {"dominated_share", share},
                              {"policies", nlohmann::json::array()}};
    std::printf("uniform policies, model means (recomputed exactly on %s; surrogate from the observation queries)\n",
                backend->description().c_str());
    std::printf("policy             code  total   rel err obs  surrogate   rel err decode   attn TV\n");
    for (const std::string& name : args->policies) {
      const UniformPolicy policy = UniformPolicy::parse(name);
      if (const std::string note = policy.full_precision_note(trace.meta().prompt_len); !note.empty())
        std::fprintf(stderr, "tierlab: note: %s\n", note.c_str());
      TraceEvaluation ev = evaluate_trace(trace, policy.ladder(), [&](const HeadData& head, const TokenWeights& w) {
        return policy.allocate(static_cast<int>(head.keys.rows()), &w);
      }, *backend);
      ev.policy = policy.name();
      const Aggregate& a = ev.model;
      std::printf("%-16s %6.3f %6.3f  %12.4e %10.4e  %14.4e  %8.4f\n", name.c_str(), a.rate.code_bits,
                  a.rate.total_bits, a.obs.rel_error, a.predicted_rel, a.decode.rel_error, a.obs.attn_tv);
      summary["policies"].push_back(to_json(ev));
    }

    // The interior: each family's surrogate-optimal allocation (exact solver), recomputed.
    std::printf("\ninterior advantage A = 1 - err(M*)/min(err(Q*), err(E*)), median over heads (ladder %s)\n",
                RateLadder::parse(kDefaultLadder).name().c_str());
    std::printf("budget   A decode    A obs   A surrogate   heads where M* beats both endpoints (decode)\n");
    summary["interior"] = nlohmann::json::array();
    for (const double budget : args->budgets) {
      InteriorOptions opt;
      opt.budget = budget;
      const InteriorReport rep = interior_advantage(trace, opt, *backend);
      int wins = 0;
      for (const auto& h : rep.heads) wins += h.advantage_decode > 0 ? 1 : 0;
      std::printf("%5.2f  %10.4f %9.4f %12.4f   %d of %zu\n", budget, rep.median_advantage_decode,
                  rep.median_advantage_obs, rep.median_advantage_surrogate, wins, rep.heads.size());
      summary["interior"].push_back(to_json(rep));
    }

    const std::string summary_path = args->out + "/summary.json";
    write_file_atomically(summary_path, summary.dump(2) + "\n");
    std::printf("\nwrote %s (per-head and per-layer numbers) and the trace %s\n", summary_path.c_str(), trace_path.c_str());
  });
}

}  // namespace tierlab::cli
