// Benchmark of the allocation solvers against their peers, side by side on one instance:
//   * the NumPy Lagrangian bisection (../shared/bench/numpy_lagrangian_ref.py), on the
//     same weights (dumped by bench/run_solver.sh from the script's own RNG stream);
//   * the MILP solver CBC on the first --cbc-items items (LP file, objective parsed).
// Costs c_ij = w_i * EPS_j on the ladder {0, 2, 4, 8, 16} bits (the script's table).
// Prints times (medians over --reps), ratios, objectives and certificate gaps.
//
// Usage: bench_solver --weights FILE --items N [--budget B] [--reps R] [--seed S]
//                     [--python EXE --ref SCRIPT --ref-reps R] [--cbc EXE --cbc-items M --cbc-scale S]
//                     [--greedy] [--workdir DIR]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "solvers/exact.hpp"
#include "solvers/greedy.hpp"

using namespace tierlab;

namespace {

const std::vector<double> kBits{0, 2, 4, 8, 16};
const std::vector<double> kEps{1.0, 0.0955, 4.02e-3, 1.40e-5, 0.0};

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = NAN;
  f >> l;
  return l;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of this process (user + system): on a machine shared with other jobs it
// tracks the time the solver itself needed, where wall time also counts waiting.
double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw InputError("bench_solver: could not run '" + cmd + "'.");
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  if (rc != 0) throw InputError("bench_solver: '" + cmd + "' exited with status " + std::to_string(rc) + ".");
  return out;
}

std::vector<double> read_weights(const std::string& path, std::int64_t n) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError("bench_solver: cannot open the weights file '" + path + "'.");
  std::vector<double> w(static_cast<std::size_t>(n));
  f.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(n * 8));
  if (f.gcount() != n * 8)
    throw InputError("bench_solver: the weights file '" + path + "' holds fewer than " + std::to_string(n) +
                     " float64 values.");
  return w;
}

MatrixRMd cost_matrix(const std::vector<double>& w, std::int64_t n) {
  MatrixRMd c(static_cast<Eigen::Index>(kBits.size()), n);
  for (Eigen::Index j = 0; j < c.rows(); ++j)
    for (std::int64_t i = 0; i < n; ++i) c(j, i) = w[static_cast<std::size_t>(i)] * kEps[static_cast<std::size_t>(j)];
  return c;
}

// Writes the MILP of the first n items in CPLEX LP format: binaries x_i_j, one tier per
// item, and the budget row.
void write_lp(const std::string& path, const MatrixRMd& c, std::int64_t n, double budget, double scale) {
  std::ofstream f(path);
  f << std::setprecision(17);
  f << "Minimize\n obj:\n";
  for (std::int64_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < kBits.size(); ++j) {
      const double v = scale * c(static_cast<Eigen::Index>(j), i);
      if (v != 0) f << " + " << v << " x" << i << "_" << j << "\n";
    }
  f << "Subject To\n";
  for (std::int64_t i = 0; i < n; ++i) {
    f << " one" << i << ":";
    for (std::size_t j = 0; j < kBits.size(); ++j) f << " + x" << i << "_" << j;
    f << " = 1\n";
  }
  f << " budget:\n";
  for (std::int64_t i = 0; i < n; ++i)
    for (std::size_t j = 1; j < kBits.size(); ++j) f << " + " << kBits[j] << " x" << i << "_" << j << "\n";
  f << " <= " << budget * static_cast<double>(n) << "\n";
  f << "Binary\n";
  for (std::int64_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < kBits.size(); ++j) f << " x" << i << "_" << j << "\n";
  f << "End\n";
}

struct Args {
  std::string weights, python = "/usr/bin/python3", ref, cbc = "cbc", workdir = "/tmp";
  std::int64_t items = 0, cbc_items = 20000;
  double budget = 2.0;
  double cbc_scale = 0;  // objective scale in the LP file; 0 = 1 / (lambda* u) of the exact solution
  int reps = 5, ref_reps = 1, seed = 0;
  bool greedy = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int k = 1; k < argc; ++k) {
    const std::string s = argv[k];
    auto val = [&]() -> std::string {
      if (k + 1 >= argc) throw InputError("bench_solver: option " + s + " needs a value.");
      return argv[++k];
    };
    if (s == "--weights") a.weights = val();
    else if (s == "--items") a.items = std::stoll(val());
    else if (s == "--budget") a.budget = std::stod(val());
    else if (s == "--reps") a.reps = std::stoi(val());
    else if (s == "--seed") a.seed = std::stoi(val());
    else if (s == "--python") a.python = val();
    else if (s == "--ref") a.ref = val();
    else if (s == "--ref-reps") a.ref_reps = std::stoi(val());
    else if (s == "--cbc") a.cbc = val();
    else if (s == "--cbc-items") a.cbc_items = std::stoll(val());
    else if (s == "--cbc-scale") a.cbc_scale = std::stod(val());
    else if (s == "--workdir") a.workdir = val();
    else if (s == "--greedy") a.greedy = true;
    else throw InputError("bench_solver: unknown option '" + s + "'.");
  }
  if (a.weights.empty() || a.items <= 0) throw InputError("bench_solver: --weights FILE and --items N are required.");
  return a;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  std::cout << std::setprecision(10);
  const std::vector<double> w = read_weights(a.weights, a.items);
  const MatrixRMd cost = cost_matrix(w, a.items);
  const MckpInstance inst{kBits, CostView::of_tier_major(cost), a.budget};
  std::cout << "instance: " << a.items << " items, ladder {0,2,4,8,16} bits, costs w_i * EPS_j, budget " << a.budget
            << " bits/element\n";

  // ---- exact -----------------------------------------------------------------------
  std::vector<double> t_exact, c_exact;
  MckpResult ex;
  for (int r = 0; r < a.reps; ++r) {
    const double t0 = now_s(), c0 = cpu_s();
    ex = solve_exact(inst);
    t_exact.push_back(now_s() - t0);
    c_exact.push_back(cpu_s() - c0);
  }
  const double exact_s = median(t_exact);
  std::cout << "exact:  median " << exact_s << " s wall over " << a.reps << " runs (min "
            << *std::min_element(t_exact.begin(), t_exact.end()) << ", max "
            << *std::max_element(t_exact.begin(), t_exact.end()) << "), median CPU " << median(c_exact)
            << " s, machine load average " << load_average() << "\n  " << ex.summary() << "\n  " << ex.message
            << "\n  LP bound " << ex.lp_bound << ", integrality gap objective - LP bound = " << ex.objective - ex.lp_bound
            << ", certificate gap " << ex.gap << ", core " << ex.core_items << " items\n";

  // ---- NumPy peer ----------------------------------------------------------------
  if (!a.ref.empty() && a.ref_reps > 0) {
    std::vector<double> t_np;
    double np_obj = NAN, np_rate = NAN;
    std::string impl;
    for (int r = 0; r < a.ref_reps; ++r) {
      const std::string out = run_capture(a.python + " " + a.ref + " --items " + std::to_string(a.items) + " --budget " +
                                          std::to_string(a.budget) + " --seed " + std::to_string(a.seed));
      const auto j = nlohmann::json::parse(out);
      t_np.push_back(j.at("seconds").get<double>());
      np_obj = j.at("objective").get<double>();
      np_rate = j.at("rate").get<double>();
      impl = j.at("impl").get<std::string>();
    }
    const double np_s = median(t_np);
    std::cout << "numpy:  median " << np_s << " s over " << a.ref_reps << " runs (" << impl << "), objective " << np_obj
              << ", rate " << np_rate << " bits/element (feasible, no certificate)\n";
    std::cout << "ratio:  numpy / exact time = " << np_s / exact_s << "x\n";
    std::cout << "objective: exact " << ex.objective << " vs numpy " << np_obj << " (exact - numpy = "
              << ex.objective - np_obj << ", relative " << (ex.objective - np_obj) / np_obj << "): "
              << (std::fabs(ex.objective - np_obj) <= 1e-12 * std::fabs(np_obj) ? "equal (within summation rounding)"
                  : ex.objective < np_obj                                       ? "exact better"
                                                                                : "EXACT WORSE")
              << "\n";
  }

  // ---- greedy on the lower hulls and on the raw ladder (optional at full size) ----------
  if (a.greedy) {
    for (const bool hull : {true, false}) {
      GreedyOptions go;
      go.compute_bound = false;
      go.hull = hull;
      const double t0 = now_s();
      const MckpResult gr = solve_greedy(inst, go);
      const double gs = now_s() - t0;
      std::cout << gr.solver << ": " << gs << " s, objective " << gr.objective << " (vs exact +"
                << gr.objective - ex.objective << ", relative " << (gr.objective - ex.objective) / ex.objective << ")\n";
    }
  }

  // ---- CBC on a prefix ---------------------------------------------------------------
  if (a.cbc_items > 0 && !a.cbc.empty()) {
    const std::int64_t n = std::min(a.cbc_items, a.items);
    const MckpInstance small{kBits, CostView{cost.data(), n, 5, 1, a.items}, a.budget};
    std::vector<double> t_small;
    MckpResult exs;
    for (int r = 0; r < a.reps; ++r) {
      const double t0 = now_s();
      exs = solve_exact(small);
      t_small.push_back(now_s() - t0);
    }
    // Re-evaluate exact's allocation here, from its choice alone.
    double ex_obj = 0, ex_rate = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const int j = exs.choice[static_cast<std::size_t>(i)];
      ex_obj += cost(j, i);
      ex_rate += kBits[static_cast<std::size_t>(j)];
    }
    std::cout << "exact on " << n << " items re-evaluated from its choice: objective " << ex_obj << ", rate "
              << ex_rate / static_cast<double>(n) << " bits/element (budget " << a.budget << ")\n";
    const std::string lp = a.workdir + "/bench_solver_cbc.lp", sol = a.workdir + "/bench_solver_cbc.sol";
    // CBC's tolerances are absolute (dual feasibility 1e-7): with costs spanning 14 orders
    // of magnitude its "optimal" can be off by more than the integrality gap. The LP file's
    // objective is therefore scaled so that one rate unit at the multiplier costs ~1
    // (--cbc-scale overrides); CBC's solution is re-evaluated on the unscaled costs.
    const double scale = a.cbc_scale > 0 ? a.cbc_scale
                         : exs.lambda > 0 ? 1.0 / (exs.lambda * 2.0)
                                          : 1.0;
    write_lp(lp, cost, n, a.budget, scale);
    std::remove(sol.c_str());
    const double t0 = now_s();
    const std::string log = run_capture(a.cbc + " " + lp + " sec 600 ratioGap 0 allowableGap 0 solve solu " + sol + " 2>&1");
    const double cbc_s = now_s() - t0;
    std::ifstream f(sol);
    std::string first;
    std::getline(f, first);
    // Recompute CBC's objective from its solution (x_i_j = 1).
    std::vector<int> pick(static_cast<std::size_t>(n), -1);
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream is(line);
      std::string idx, name;
      double value = 0;
      if (!(is >> idx >> name >> value)) continue;
      if (name.size() > 1 && name[0] == 'x' && value > 0.5) {
        const auto us = name.find('_');
        pick[static_cast<std::size_t>(std::stoll(name.substr(1, us - 1)))] = std::stoi(name.substr(us + 1));
      }
    }
    double cbc_obj = 0, cbc_rate = 0;
    bool complete = true;
    for (std::int64_t i = 0; i < n; ++i) {
      const int j = pick[static_cast<std::size_t>(i)];
      if (j < 0) {
        complete = false;
        continue;
      }
      cbc_obj += cost(j, i);
      cbc_rate += kBits[static_cast<std::size_t>(j)];
    }
    std::cout << "cbc:    " << n << " items, objective scaled by " << scale << " in the LP file, " << cbc_s
              << " s wall (LP write excluded), status line: '" << first << "'\n"
              << "        objective recomputed from its solution " << cbc_obj << (complete ? "" : " (INCOMPLETE)")
              << ", rate " << cbc_rate / static_cast<double>(n) << " bits/element\n"
              << "exact on the same " << n << " items: median " << median(t_small) << " s, " << exs.summary() << "\n"
              << "ratio:  cbc / exact time = " << cbc_s / median(t_small) << "x; objective exact - cbc = "
              << exs.objective - cbc_obj << " (relative " << (exs.objective - cbc_obj) / cbc_obj << "): "
              << (std::fabs(exs.objective - cbc_obj) <= 1e-9 * cbc_obj ? "same optimum"
                  : exs.objective < cbc_obj                             ? "exact better"
                                                                        : "CBC BETTER")
              << "\n";
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_solver: " << e.what() << "\n";
  return 1;
}
