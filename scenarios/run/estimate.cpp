// The size of a run before any work (estimate.hpp).
#include "scenarios/run/estimate.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

namespace {

constexpr double kFixedResident = 64.0 * 1024 * 1024;
constexpr double kMeasuredOverFormula = 1.0;

struct Shape {
  double heads = 0, group = 1, dim = 0, tokens = 0, obs = 0, decode = 0, bytes_per_value = 4;
};

CellSize size_of(const Shape& s, double tiers, bool written) {
  CellSize c;
  c.heads = s.heads;
  c.tokens = s.tokens + s.decode;
  const double per_head = s.tokens * s.dim * 3 + s.group * (s.obs + s.decode) * s.dim + 2 * s.decode * s.dim;
  c.trace_bytes = per_head * s.heads * s.bytes_per_value;
  c.disk_bytes = written ? c.trace_bytes : 0;
  c.resident_bytes = kMeasuredOverFormula * (kFixedResident + 8 * s.heads * tiers * s.tokens +
                                             4 * s.tokens * s.dim * (4 + tiers) +
                                             16 * s.group * (s.obs + s.decode) * s.tokens);
  return c;
}

std::string with_commas(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  std::string digits = buf, out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

CellSize estimate_cell(const Scenario& sc, const ScenarioCell& cell) {
  const double tiers = static_cast<double>(sc.ladder.size());
  Shape s;
  if (cell.source == "synthetic") {
    const SynthParams& p = cell.synth;
    s = {double(p.n_layers) * p.n_kv_heads, double(p.group_size), double(p.head_dim), double(p.prompt_len),
         double(p.obs_window), double(p.decode_steps), p.storage == DType::F32 ? 4.0 : 2.0};
    return size_of(s, tiers, false);  // generated in memory, head by head: nothing on disk
  }
  if (cell.source == "model") {
    // llama2.c header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
    std::int32_t h[7] = {};
    std::ifstream in(cell.checkpoint, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(h), sizeof h))
      throw InputError("checkpoint '" + cell.checkpoint + "' (cell '" + cell.id + "'): cannot read its header.");
    const double n_heads = std::max(1, h[3]), n_kv = std::max(1, std::abs(h[4]));
    s = {double(std::max(1, h[2])) * n_kv, n_heads / n_kv, std::max(1, h[0]) / n_heads, double(cell.prompt_len),
         double(cell.prompt_len), double(cell.decode_steps), 4.0};
    return size_of(s, tiers, true);
  }
  const TraceMeta m = TraceReader(cell.path).meta();
  s = {double(m.n_heads()), double(m.group_size), double(m.head_dim), double(m.prompt_len), double(m.obs_window),
       double(m.decode_steps), m.storage == DType::F32 ? 4.0 : 2.0};
  return size_of(s, tiers, false);
}

RunEstimate estimate_run(const Scenario& sc, const std::vector<std::size_t>& cells, int jobs) {
  RunEstimate e;
  std::vector<CellSize> sizes;
  double min_tokens = HUGE_VAL, max_tokens = 0;
  for (const std::size_t i : cells) {
    sizes.push_back(estimate_cell(sc, sc.cells.at(i)));
    const CellSize& c = sizes.back();
    e.head_tokens += c.heads * c.tokens;
    e.trace_bytes += c.trace_bytes;
    min_tokens = std::min(min_tokens, c.tokens);
    max_tokens = std::max(max_tokens, c.tokens);
  }
  e.cells = static_cast<int>(cells.size());
  const auto largest = [&](double CellSize::*field) {
    std::vector<double> v;
    for (const CellSize& c : sizes) v.push_back(c.*field);
    std::sort(v.begin(), v.end(), std::greater<>());
    double sum = 0;
    for (std::size_t k = 0; k < v.size() && k < static_cast<std::size_t>(std::max(1, jobs)); ++k) sum += v[k];
    return sum;
  };
  e.peak_disk_bytes = largest(&CellSize::disk_bytes);
  e.peak_resident_bytes = largest(&CellSize::resident_bytes);
  e.min_tokens = e.cells > 0 ? min_tokens : 0;
  e.max_tokens = max_tokens;
  double heads = 0;
  for (const CellSize& c : sizes) heads += c.heads;
  e.heads = heads;
  return e;
}

std::string RunEstimate::describe(int jobs) const {
  const std::string tokens = min_tokens == max_tokens ? with_commas(max_tokens)
                                                      : with_commas(min_tokens) + "-" + with_commas(max_tokens);
  char head_tokens_text[32];
  std::snprintf(head_tokens_text, sizeof head_tokens_text, "%.3g", head_tokens);
  return std::to_string(cells) + (cells == 1 ? " cell" : " cells") + " to compute, " + with_commas(heads) +
         " KV heads x " + tokens + " tokens (" + head_tokens_text + " head-tokens); traces " +
         format_bytes(trace_bytes) + " in all, " +
         (peak_disk_bytes > 0 ? "at most " + format_bytes(peak_disk_bytes) + " on disk at once"
                              : std::string("none written to disk")) +
         "; about " + format_bytes(peak_resident_bytes) + " resident (" + std::to_string(jobs) +
         (jobs == 1 ? " job)" : " jobs)");
}

SizeLimits size_limits(const std::string& out, double max_memory, double max_disk) {
  SizeLimits lim;
  if (max_memory > 0) {
    lim.memory_bytes = max_memory, lim.memory_source = "--max-memory";
  } else {
    lim.memory_bytes = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
    lim.memory_source = "the machine's physical memory";
  }
  if (max_disk > 0) {
    lim.disk_bytes = max_disk, lim.disk_source = "--max-disk";
  } else {
    std::filesystem::path at = std::filesystem::absolute(out.empty() ? "." : out);
    std::error_code ec;
    while (!std::filesystem::exists(at, ec) && at.has_parent_path() && at != at.parent_path()) at = at.parent_path();
    struct statvfs st {};
    if (::statvfs(at.c_str(), &st) == 0) {
      lim.disk_bytes = double(st.f_bavail) * double(st.f_frsize);
      lim.disk_source = "the free space of '" + at.string() + "'";
    } else {
      lim.disk_bytes = HUGE_VAL, lim.disk_source = "unknown free space";
    }
  }
  return lim;
}

std::string size_fault(const RunEstimate& e, const SizeLimits& lim, int jobs) {
  std::string over;
  if (e.peak_resident_bytes > lim.memory_bytes)
    over = "its estimated resident memory " + format_bytes(e.peak_resident_bytes) + " exceeds " + lim.memory_source +
           " (" + format_bytes(lim.memory_bytes) + ")";
  if (e.peak_disk_bytes > lim.disk_bytes)
    over += (over.empty() ? "" : ", and ") + std::string("its temporary traces (") + format_bytes(e.peak_disk_bytes) +
            " at once) exceed " + lim.disk_source + " (" + format_bytes(lim.disk_bytes) + ")";
  if (over.empty()) return {};
  return "this run is too large for the machine: " + over + ". Estimate: " + e.describe(jobs) +
         ". Reduce the scenario (context lengths, seeds, presets) or --jobs, or run it anyway with --force-size.";
}

double parse_size(const std::string& text, const std::string& what) {
  std::string t = text;
  double unit = 1;
  const auto strip = [&](const char* suffix) {
    const std::string s(suffix);
    if (t.size() > s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0) {
      t.erase(t.size() - s.size());
      return true;
    }
    return false;
  };
  if (!strip("iB")) strip("B");
  const char units[] = {'K', 'M', 'G', 'T', 'P'};
  for (int k = 0; k < 5; ++k)
    if (!t.empty() && (t.back() == units[k] || t.back() == units[k] + ('a' - 'A'))) {
      unit = std::pow(1024.0, k + 1);
      t.pop_back();
      break;
    }
  const double v = parse_real(t, what + " ('" + text + "')", 0.0, 1e30);
  if (!(v > 0)) throw InputError(what + " is '" + text + "'; a size must be positive (e.g. 8G, 512M).");
  return v * unit;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int k = 0;
  while (bytes >= 1024 && k < 6) bytes /= 1024, ++k;
  char buf[48];
  std::snprintf(buf, sizeof buf, k == 0 ? "%.0f %s" : "%.1f %s", bytes, units[k]);
  return buf;
}

}  // namespace tierlab
