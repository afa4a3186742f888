#include "scenarios/run/mpi/mpi_runner.hpp"

#include <mpi.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "model/base/error.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/run/progress.hpp"

namespace tierlab {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

enum Tag : int { kAssign = 1, kResult = 2, kError = 3, kCancelled = 4, kDone = 5, kAbort = 6 };
enum Category : std::int32_t { kInput = 0, kRecompute = 1, kInternal = 2 };

struct Message {
  int tag = 0, source = 0;
  std::int32_t cell = -1, code = 0;
  std::string text;
};

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

void send(int dest, int tag, std::int32_t cell, std::int32_t code = 0, const std::string& text = {}) {
  std::string buf(8 + text.size(), '\0');
  std::memcpy(buf.data(), &cell, 4);
  std::memcpy(buf.data() + 4, &code, 4);
  std::memcpy(buf.data() + 8, text.data(), text.size());
  if (buf.size() > static_cast<std::size_t>(INT32_MAX)) throw std::runtime_error("MPI message over 2 GiB");
  check(MPI_Send(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
}

// A message from `source` (or any), if one has arrived.
std::optional<Message> poll(int source = MPI_ANY_SOURCE) {
  int flag = 0;
  MPI_Status st;
  check(MPI_Iprobe(source, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st), "MPI_Iprobe");
  if (!flag) return std::nullopt;
  int n = 0;
  check(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
  std::string buf(static_cast<std::size_t>(n), '\0');
  check(MPI_Recv(buf.data(), n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  if (buf.size() < 8) throw std::runtime_error("MPI: a message of " + std::to_string(n) + " bytes (fewer than 8)");
  Message m;
  m.tag = st.MPI_TAG;
  m.source = st.MPI_SOURCE;
  std::memcpy(&m.cell, buf.data(), 4);
  std::memcpy(&m.code, buf.data() + 4, 4);
  m.text = buf.substr(8);
  return m;
}

// Waiting without holding a core: MPI's blocking calls spin, and the core is wanted by the
// computing thread beside the scheduler (and by other ranks of the node). Polls for about
// 20 us at first, backing off to 2 ms.
class Backoff {
 public:
  void reset() { us_ = 20; }
  void wait() {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    us_ = std::min(us_ * 2, 2000);
  }

 private:
  int us_ = 20;
};

// The error of a failed cell, as (category, message).
std::pair<Category, std::string> describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const InputError& x) {
    return {kInput, x.what()};
  } catch (const RecomputeError& x) {
    return {kRecompute, x.what()};
  } catch (const std::exception& x) {
    return {kInternal, x.what()};
  } catch (...) {
    return {kInternal, "unknown exception"};
  }
}

std::exception_ptr make_error(Category c, const std::string& text) {
  if (c == kInput) return std::make_exception_ptr(InputError(text));
  if (c == kRecompute) return std::make_exception_ptr(RecomputeError(text));
  return std::make_exception_ptr(std::logic_error(text));
}

// One thread that computes cells with its own backend, one at a time: the rank's compute
// slot. The thread that submits polls ready(); stop() abandons the cell at its next step.
class CellComputer {
 public:
  struct Outcome {
    std::int32_t cell = -1;
    std::optional<nlohmann::json> json;  // the cell, or
    std::exception_ptr error;            // why not (none and no json: cancelled)
  };

  CellComputer(const Scenario& sc, const RunOptions& opt, int local_rank, std::string work_dir)
      : sc_(sc), opt_(opt), local_rank_(local_rank), work_dir_(std::move(work_dir)), thread_([this] { loop(); }) {}
  ~CellComputer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
      stop_.store(true);
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(std::int32_t cell) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = cell;
      outcome_.reset();
      stop_.store(false);
    }
    cv_.notify_all();
  }
  bool busy() {
    std::lock_guard<std::mutex> lock(mu_);
    return job_ >= 0 || running_;
  }
  std::optional<Outcome> take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<Outcome> o = std::move(outcome_);
    outcome_.reset();
    return o;
  }
  void stop() { stop_.store(true); }
  std::string backend() {
    std::lock_guard<std::mutex> lock(mu_);
    return backend_;
  }

 private:
  void loop() {
    std::unique_ptr<Recomputer> be;
    std::exception_ptr be_error;
    try {
      // The thread's CUDA device first (a no-op without CUDA), then its backend.
      use_cuda_device(local_rank_);
      be = make_run_backend(sc_, opt_);
      std::lock_guard<std::mutex> lock(mu_);
      backend_ = be->description();
    } catch (...) {
      be_error = std::current_exception();
    }
    for (;;) {
      std::int32_t cell = -1;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return quit_ || job_ >= 0; });
        if (quit_) return;
        cell = job_;
        job_ = -1;
        running_ = true;
      }
      Outcome o;
      o.cell = cell;
      try {
        if (be_error) std::rethrow_exception(be_error);
        o.json = compute_cell(sc_, sc_.cells[static_cast<std::size_t>(cell)], *be, work_dir_, &stop_);
      } catch (const Cancelled&) {
      } catch (...) {
        o.error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      outcome_ = std::move(o);
      running_ = false;
    }
  }

  const Scenario& sc_;
  const RunOptions& opt_;
  int local_rank_;
  std::string work_dir_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  std::int32_t job_ = -1;
  bool running_ = false, quit_ = false;
  std::optional<Outcome> outcome_;
  std::string backend_;
  std::thread thread_;  // last: started when everything above exists
};

std::string temp_base() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t != '\0' ? t : "/tmp";
}

// TMPDIR/tierlab-<pid>@<host>: a worker rank's temporary traces (the output folder is rank 0's).
std::string temp_work_dir() { return temp_base() + "/tierlab-" + process_tag(); }

// The work folders of this host's killed worker ranks (their pid no longer runs).
void remove_dead_work_dirs() {
  std::error_code ec;
  const std::string mine = process_tag();
  const std::string host = mine.substr(mine.find('@'));
  for (const auto& e : fs::directory_iterator(temp_base(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tierlab-", 0) != 0 || name.size() < host.size() ||
        name.compare(name.size() - host.size(), host.size(), host) != 0)
      continue;
    const std::string pid = name.substr(8, name.size() - 8 - host.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

std::string rank_name(const MpiSession& s, int rank) {
  return "rank " + std::to_string(rank) + (rank == s.rank() ? " on " + s.host() : "");
}

// Ranks 1..N-1: compute what rank 0 hands out until it says done (or abort).
RunResult work(const Scenario& sc, const RunOptions& opt, const MpiSession& s) {
  RunResult res;
  res.cells_total = static_cast<int>(sc.cells.size());
  res.ranks = s.size();
  ContentHashes content;
  SigintScope sigint;  // mpirun's SIGTERM: the cell in progress is abandoned, rank 0 told
  remove_dead_work_dirs();
  const std::string work_dir = temp_work_dir();
  CellComputer computer(sc, opt, s.local_rank(), work_dir);
  Backoff backoff;
  const auto finish = [&](bool aborted) {
    remove_work_dir(work_dir);
    res.interrupted = aborted;
    return res;
  };
  for (;;) {
    std::optional<Message> m = poll(0);
    if (!m) {
      backoff.wait();
      continue;
    }
    backoff.reset();
    if (m->tag == kDone) return finish(false);
    if (m->tag == kAbort) return finish(true);
    if (m->tag != kAssign || m->cell < 0 || m->cell >= res.cells_total)
      throw std::logic_error("MPI: unexpected message (tag " + std::to_string(m->tag) + ") from rank 0");
    const ScenarioCell& cell = sc.cells[static_cast<std::size_t>(m->cell)];
    // The same inputs as rank 0's: a trace or checkpoint read here must be the same file.
    try {
      const std::string mine = cell_hash(sc, cell, content);
      if (mine != m->text)
        throw InputError("the inputs of cell '" + cell.id + "' differ between rank 0 (cell hash " + m->text + ") and " +
                         rank_name(s, s.rank()) + " (" + mine +
                         "): every rank must see the same scenario file, traces and checkpoints.");
    } catch (...) {
      const auto [cat, text] = describe(std::current_exception());
      send(0, kError, m->cell, cat, rank_name(s, s.rank()) + ": " + text);
      continue;
    }
    computer.submit(m->cell);
    bool aborted = false;
    std::optional<CellComputer::Outcome> o;
    while (!(o = computer.take())) {
      if (!aborted) {
        if (std::optional<Message> a = poll(0)) {
          if (a->tag != kAbort) throw std::logic_error("MPI: rank 0 sent tag " + std::to_string(a->tag) + " to a busy rank");
          aborted = true;
          computer.stop();
        }
      }
      if (run_stop_flag().load()) computer.stop();  // this rank's SIGTERM
      backoff.wait();
    }
    backoff.reset();
    if (o->json) {
      ++res.cells_computed;
      send(0, kResult, m->cell, 0, o->json->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else if (o->error) {
      const auto [cat, text] = describe(o->error);
      send(0, kError, m->cell, cat, rank_name(s, s.rank()) + ": " + text);
    } else {
      send(0, kCancelled, m->cell);
    }
    if (aborted) return finish(true);
  }
}

// Rank 0: plan, hand out, write, and (computing too) run its own slot.
RunResult schedule(const Scenario& sc, const RunOptions& opt, const MpiSession& s, const MpiRunOptions& mo) {
  const int ranks = s.size();
  std::vector<char> told(static_cast<std::size_t>(ranks), 0);  // a final done/abort was sent
  const auto release_all = [&](int tag) {
    for (int r = 1; r < ranks; ++r)
      if (!told[r]) send(r, tag, -1), told[r] = 1;
  };
  RunPlan plan;
  try {
    plan = plan_run(sc, opt);
  } catch (...) {
    release_all(kAbort);
    throw;
  }
  RunResult res = plan.result;
  res.ranks = ranks;
  res.shard_cells = res.cells_total;
  std::deque<std::int32_t> queue(plan.pending.begin(), plan.pending.end());
  std::vector<std::int32_t> busy(static_cast<std::size_t>(ranks), -1);  // the cell each rank computes
  std::exception_ptr first_error;
  std::string first_context;
  SigintScope sigint;
  std::atomic<bool>& stop = run_stop_flag();
  TerminalProgress bar("run " + sc.name);
  const bool lines = opt.progress && isatty(2) != 1;  // under mpirun stderr is a pipe: one line per cell
  int done = res.cells_skipped;
  if (opt.progress) bar.update(done, res.cells_total);
  const auto t_start = Clock::now();

  const auto finished = [&](std::int32_t i, nlohmann::json j, int rank) {
    const ScenarioCell& cell = sc.cells[static_cast<std::size_t>(i)];
    const double secs = j.value("seconds", 0.0);
    write_cell_file(opt.out, cell, std::move(j), plan.hashes.at(cell.id));
    ++res.cells_computed, ++done;
    if (opt.on_cell) opt.on_cell(cell.id, true);
    if (opt.progress) bar.update(done, res.cells_total);
    if (lines) {
      std::printf("[%d/%d] cell %s: done on rank %d in %.1f s (%.0f s since the start)\n", done, res.cells_total,
                  cell.id.c_str(), rank, secs, std::chrono::duration<double>(Clock::now() - t_start).count());
      std::fflush(stdout);
    }
  };
  const auto failed = [&](std::int32_t i, const std::exception_ptr& e, const std::string& where) {
    if (!first_error)
      first_error = e, first_context = "cell '" + sc.cells[static_cast<std::size_t>(i)].id + "'" + where;
    stop.store(true);
  };
  const auto next_cell = [&]() -> std::int32_t {
    if (stop.load() || queue.empty()) return -1;
    const std::int32_t i = queue.front();
    queue.pop_front();
    return i;
  };
  const auto assign = [&](int r) {
    const std::int32_t i = next_cell();
    if (i < 0) return;
    busy[r] = i;
    send(r, kAssign, i, 0, plan.hashes.at(sc.cells[static_cast<std::size_t>(i)].id));
  };

  const bool local = ranks == 1 || !mo.scheduler_only;
  std::optional<CellComputer> computer;
  std::int32_t local_cell = -1;
  try {
    if (local && !queue.empty()) computer.emplace(sc, opt, s.local_rank(), run_work_dir(opt.out));
    for (int r = 1; r < ranks; ++r) assign(r);
    if (computer && (local_cell = next_cell()) >= 0) computer->submit(local_cell);
    bool aborting = false;
    Backoff backoff;
    for (;;) {
      const bool remote_busy = std::any_of(busy.begin() + 1, busy.end(), [](std::int32_t c) { return c >= 0; });
      if (!remote_busy && local_cell < 0) break;
      if (stop.load() && !aborting) {  // an error or SIGINT: every busy rank abandons its cell
        aborting = true;
        for (int r = 1; r < ranks; ++r)
          if (busy[r] >= 0) send(r, kAbort, -1), told[r] = 1;
        if (computer) computer->stop();
      }
      bool any = false;
      if (std::optional<Message> m = poll()) {
        any = true;
        const auto t0 = Clock::now();
        const int r = m->source;
        if (r <= 0 || r >= ranks || busy[r] != m->cell)
          throw std::logic_error("MPI: unexpected message (tag " + std::to_string(m->tag) + ", cell " +
                                 std::to_string(m->cell) + ") from rank " + std::to_string(r));
        busy[r] = -1;
        if (m->tag == kResult) {
          finished(m->cell, nlohmann::json::parse(m->text), r);
        } else if (m->tag == kError) {
          failed(m->cell, make_error(static_cast<Category>(m->code), m->text), "");
        } else if (m->tag != kCancelled) {
          throw std::logic_error("MPI: unexpected tag " + std::to_string(m->tag) + " from rank " + std::to_string(r));
        }
        if (!aborting) assign(r);
        ++res.scheduler_cells;
        res.scheduler_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      }
      if (local_cell >= 0) {
        if (std::optional<CellComputer::Outcome> o = computer->take()) {
          any = true;
          if (o->json) {
            finished(local_cell, std::move(*o->json), 0);
          } else if (o->error) {
            failed(local_cell, o->error, " (rank 0 on " + s.host() + ")");
          }
          local_cell = next_cell();
          if (local_cell >= 0) computer->submit(local_cell);
        }
      }
      if (any) {
        backoff.reset();
      } else {
        backoff.wait();
      }
    }
    res.backend = computer ? computer->backend() : std::string();
    computer.reset();
    release_all(stop.load() ? kAbort : kDone);
  } catch (...) {
    // A defect or a failed write here: stop every rank, then report it.
    stop.store(true);
    if (computer) computer->stop();
    computer.reset();
    release_all(kAbort);
    bar.finish();
    throw;
  }
  bar.finish();
  remove_work_dir(run_work_dir(opt.out));
  if (res.backend.empty()) res.backend = "the other ranks' backends";
  res.backend += " on " + std::to_string(ranks) + " MPI rank" + (ranks == 1 ? "" : "s");
  if (first_error) rethrow_with_context(first_error, first_context);
  if (stop.load()) {
    res.interrupted = true;
    return res;
  }
  write_run_tables(sc, opt.out, plan.hashes);
  res.tables_written = true;
  return res;
}

}  // namespace

MpiSession::MpiSession() {
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    throw InputError("run: this MPI library does not support MPI_THREAD_FUNNELED, which tierlab needs.");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_free(&node);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, static_cast<std::size_t>(len));
}

MpiSession::~MpiSession() { MPI_Finalize(); }

bool MpiSession::all(bool ok) const {
  int mine = ok ? 1 : 0, every = 0;
  check(MPI_Allreduce(&mine, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  return every == 1;
}

RunResult run_scenario_mpi(const Scenario& sc, const RunOptions& opt, const MpiSession& s, const MpiRunOptions& mo) {
  if (opt.jobs != 1)
    throw InputError("run: --jobs is " + std::to_string(opt.jobs) +
                     " under mpirun; each rank computes one cell at a time: start more ranks instead.");
  if (opt.shard.count != 1) throw InputError("run: --shard and mpirun are two ways to split a run; use one of them.");
  return s.rank() == 0 ? schedule(sc, opt, s, mo) : work(sc, opt, s);
}

}  // namespace tierlab
