// Backend choice and input checks for exact recomputation (recompute.hpp).
#include "gpu/recompute.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "gpu/cpu_recompute.hpp"
#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/base/phases.hpp"
#ifdef TIERLAB_HAVE_CUDA
#include "gpu/cuda_backend.hpp"
#endif

namespace tierlab {

namespace {

std::string shape_of(const MatrixRM& m) {
  return std::to_string(m.rows()) + " x " + std::to_string(m.cols());
}

// A reason as a clause to embed in a sentence (no trailing full stop).
std::string clause(std::string why) {
  while (!why.empty() && (why.back() == '.' || why.back() == ' ')) why.pop_back();
  return why;
}

}  // namespace

constexpr auto kBackends = enum_table<Backend>("recomputation backend", {{Backend::Auto, "auto"},
                                                                        {Backend::Cpu, "cpu"},
                                                                        {Backend::Cuda, "cuda"}});

Backend parse_backend(const std::string& name) { return parse_enum(kBackends, name); }

std::string check_batch(const HeadBatch& batch) {
  const HeadProblem& hp = batch.problem;
  if (!hp.queries) return "HeadProblem.queries is null.";
  if (!hp.exact_keys) return "HeadProblem.exact_keys is null.";
  if (!hp.values) return "HeadProblem.values is null.";
  const long nq = hp.queries->rows(), d = hp.queries->cols(), T = hp.exact_keys->rows();
  if (d < 1) return "HeadProblem.queries has head dimension d = 0 (shape " + shape_of(*hp.queries) + ").";
  if (nq < 1) return "HeadProblem.queries has no query rows (shape " + shape_of(*hp.queries) + ").";
  if (T < 1) return "HeadProblem.exact_keys has no tokens (shape " + shape_of(*hp.exact_keys) + ").";
  const std::string want = std::to_string(T) + " x " + std::to_string(d) +
                           " (T from exact_keys, d from queries)";
  if (hp.exact_keys->cols() != d)
    return "HeadProblem.exact_keys is " + shape_of(*hp.exact_keys) + " but must be " + want + ".";
  if (hp.values->rows() != T || hp.values->cols() != d)
    return "HeadProblem.values is " + shape_of(*hp.values) + " but must be " + want + ".";
  if (hp.variants.size() > 255)
    return "HeadProblem.variants has " + std::to_string(hp.variants.size()) +
           " key variants but a Selection (uint8) can address at most 255.";
  for (std::size_t v = 0; v < hp.variants.size(); ++v) {
    const MatrixRM* k = hp.variants[v];
    if (!k) return "HeadProblem.variants[" + std::to_string(v) + "] is null.";
    if (k->rows() != T || k->cols() != d)
      return "HeadProblem.variants[" + std::to_string(v) + "] is " + shape_of(*k) + " but must be " +
             want + ".";
  }
  if (!hp.visible.empty()) {
    if (static_cast<long>(hp.visible.size()) != nq)
      return "HeadProblem.visible has " + std::to_string(hp.visible.size()) + " entries but there are " +
             std::to_string(nq) + " query rows.";
    for (std::size_t r = 0; r < hp.visible.size(); ++r)
      if (hp.visible[r] < 1 || hp.visible[r] > T)
        return "HeadProblem.visible[" + std::to_string(r) + "] = " + std::to_string(hp.visible[r]) +
               " is outside 1.." + std::to_string(T) + ".";
  }
  const std::size_t n_var = hp.variants.size();
  for (std::size_t s = 0; s < batch.selections.size(); ++s) {
    const Selection& sel = batch.selections[s];
    if (static_cast<long>(sel.size()) != T)
      return "HeadBatch.selections[" + std::to_string(s) + "] has length " + std::to_string(sel.size()) +
             " but the head has T = " + std::to_string(T) + " tokens.";
    for (std::size_t t = 0; t < sel.size(); ++t)
      if (sel[t] > n_var)
        return "HeadBatch.selections[" + std::to_string(s) + "] picks variant code " +
               std::to_string(int(sel[t])) + " at token " + std::to_string(t) + " but the head has " +
               std::to_string(n_var) + " key variants (codes 0 = evict .. " + std::to_string(n_var) + ").";
  }
  return {};
}

bool cuda_available(std::string* reason) {
#ifdef TIERLAB_HAVE_CUDA
  std::string why;
  const bool present = cuda_device_present(&why);
  if (!present && reason) *reason = why.empty() ? "no CUDA device was found" : why;
  return present;
#else
  if (reason) *reason = "tierlab was built without CUDA (nvcc not found or TIERLAB_CUDA=OFF)";
  return false;
#endif
}

std::string use_cuda_device(int local_rank, std::string* reason) {
#ifdef TIERLAB_HAVE_CUDA
  int device = 0, count = 0;
  const std::string why = select_cuda_device(local_rank, &device, &count);
  if (why.empty()) return "cuda device " + std::to_string(device) + " of " + std::to_string(count);
  if (reason) *reason = why;
  return "";
#else
  (void)local_rank;
  if (reason) *reason = "tierlab was built without CUDA (nvcc not found or TIERLAB_CUDA=OFF)";
  return "";
#endif
}

namespace {

// Dense work (phases.hpp): the exact logits (`exact`: not when a prepared set has them) and
// each selection's output change D = delta V, 2 nq T d flops each, and each variant's logit
// change at the tokens a selection reads it, 2 nq d per token: the work the numbers need (the
// CPU backend forms it there only, and not where the variant's row equals the exact key, so for
// it this count is an upper bound: cpu_recompute.hpp set_variants; the CUDA backend forms it at
// every token, more than this count); bytes: the keys, values and variants read, the prepared p and
// each variant's u (nq x T floats) written once and read by every selection.
void count_work(const HeadBatch& b, bool exact) {
  if (!check_batch(b).empty()) return;  // a malformed batch is refused by the backend, not counted
  const double nq = static_cast<double>(b.problem.queries->rows()), T = static_cast<double>(b.problem.exact_keys->rows()),
               d = static_cast<double>(b.problem.exact_keys->cols()),
               ns = static_cast<double>(b.selections.size()), e = exact ? 1.0 : 0.0;
  // nv: the variants' read tokens, in units of T.
  double read_tokens = 0;
  for (const std::vector<std::uint8_t>& mask : cpu::read_masks(b))
    for (const std::uint8_t r : mask) read_tokens += r;
  const double nv = T > 0 ? read_tokens / T : 0.0;
  add_phase_work(Phase::Recompute, 2 * nq * T * d * (e + nv + ns),
                 4 * T * d * (2 * e + nv) + 4 * nq * d + T * ns + 4 * nq * T * (e + nv) + 8 * nq * T * ns);
}

void check_errors(const Recomputer& backend, const EvalResult& r) {
  if (!r.ok) throw RecomputeError("recomputation failed on backend " + backend.description() + ": " + r.message);
  for (std::size_t b = 0; b < r.errors.size(); ++b)
    for (std::size_t s = 0; s < r.errors[b].size(); ++s)
      if (const std::string bad = non_finite_metric(r.errors[b][s]); !bad.empty())
        throw RecomputeError("recomputation on backend " + backend.description() + " gave " + bad + " (batch " +
                             std::to_string(b) + ", selection " + std::to_string(s) +
                             ") although the head is within the magnitude range of docs/model.md section 12, "
                             "convention 10; this is a defect: please report it with the trace.");
}

// A backend that keeps nothing between calls: each call evaluates the batch on its own.
class UnpreparedSet final : public PreparedQuerySet {
 public:
  explicit UnpreparedSet(Recomputer& backend) : backend_(backend) {}
  EvalResult evaluate(const HeadBatch& batch) override { return backend_.evaluate({batch}); }
  bool keeps_exact() const override { return false; }

 private:
  Recomputer& backend_;
};

}  // namespace

std::unique_ptr<PreparedQuerySet> Recomputer::prepare(const HeadProblem&) { return std::make_unique<UnpreparedSet>(*this); }

std::vector<ErrorMetrics> recompute(Recomputer& backend, PreparedQuerySet& prepared, const HeadBatch& batch) {
  const PhaseScope phase(Phase::Recompute);
  // The exact half is counted where it is computed: by the first call on a set that keeps it,
  // by every call on one that does not.
  count_work(batch, prepared.calls == 0 || !prepared.keeps_exact());
  ++prepared.calls;
  EvalResult r = prepared.evaluate(batch);
  check_errors(backend, r);
  return std::move(r.errors.at(0));
}

std::vector<std::vector<ErrorMetrics>> recompute(Recomputer& backend, const std::vector<HeadBatch>& batches) {
  const PhaseScope phase(Phase::Recompute);
  for (const HeadBatch& b : batches) count_work(b, true);
  EvalResult r = backend.evaluate(batches);
  check_errors(backend, r);
  return std::move(r.errors);
}

std::string non_finite_metric(const ErrorMetrics& m) {
  const std::pair<const char*, double> fields[] = {
      {"rel_error", m.rel_error}, {"abs_error", m.abs_error}, {"attn_tv", m.attn_tv}, {"logit_error", m.logit_error}};
  for (const auto& [name, value] : fields)
    if (!std::isfinite(value)) return std::string(name) + " = " + (std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf");
  return {};
}

std::unique_ptr<Recomputer> make_recomputer(Backend backend, std::string* note) {
  if (note) note->clear();
  if (backend == Backend::Cpu) return make_cpu_recomputer();

  std::string why;
  std::unique_ptr<Recomputer> cuda;
  if (cuda_available(&why)) {
#ifdef TIERLAB_HAVE_CUDA
    cuda = make_cuda_recomputer(&why);
    if (!cuda && why.empty()) why = "the CUDA backend could not be created";
#endif
  }
  if (cuda) return cuda;
  if (backend == Backend::Cuda) {
    if (note) *note = "The cuda backend is unavailable: " + clause(why) + ".";
    return nullptr;
  }
  if (note) *note = "Using the cpu backend because cuda is unavailable: " + clause(why) + ".";
  return make_cpu_recomputer();
}

}  // namespace tierlab
