// Capture throughput on the real stories260K model, in one run:
//   forward   the forward pass alone (greedy decoding from BOS, llama2.c run.c's loop)
//   capture   capture(): the same forward pass with every layer's q, k (pre/post RoPE), v
//             recorded, then the trace's heads built in memory (no file written)
//   write     capture() followed by writing the trace file (safetensors, fsync'd)
// in tokens per second on one thread, and the ratios capture/forward (the recording
// overhead) and forward/6500. The peer figure, about 6,500 tokens/s, is issue 4's
// measurement of llama2.c's plain C forward pass (run.c, one core) on this machine; it is
// quoted, not rerun here.
//
// Usage: bench_capture [CHECKPOINT] [--repeats N]
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "model/llama2c/capture.hpp"
#include "model/llama2c/llama2c.hpp"

using namespace tierlab;

namespace {

constexpr double kPlainCTokensPerSecond = 6500.0;  // issue 4: llama2.c run.c, one core, this machine

// This thread's CPU time: the machine is shared, and CPU time is what a core spends on
// the work whatever else runs beside it. Wall-clock figures are printed too.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Timing {
  double cpu = 1e300, wall = 1e300;  // best of the runs
  template <class F>
  void run(F&& f) {
    const double c0 = cpu_now(), w0 = wall_now();
    f();
    cpu = std::min(cpu, cpu_now() - c0);
    wall = std::min(wall, wall_now() - w0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string checkpoint = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";
  int repeats = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      checkpoint = argv[i];
    }
  }
  Eigen::setNbThreads(1);
  const Llama2cModel model(checkpoint);
  std::printf("bench_capture: %s (%s), one thread, best of %d runs\n", model.name().c_str(),
              model.config().describe().c_str(), repeats);
  std::printf("%-36s %12s %12s %11s\n", "case", "tok/s (CPU)", "tok/s (wall)", "vs plain C");
  std::int32_t checksum = 0;

  for (const int n : {256, 512}) {
    // The same n positions three ways: greedy decoding from BOS (forward only); capture()
    // with the first n/2 of those tokens as the prompt and n/2 greedy decode steps (which
    // continue the same sequence), building the trace in memory; and capture() + file.
    Sampler greedy;
    CaptureOptions opt;
    opt.prompt.ids = generate(model, {kLlama2cBos}, n / 2 - 1, greedy);
    opt.decode_steps = n / 2;
    opt.obs_window = 32;
    const std::string path = "/tmp/bench_capture_" + std::to_string(n) + ".safetensors";
    Timing fwd, cap, file;
    for (int r = 0; r < repeats; ++r) {
      fwd.run([&] {
        Llama2cSession s(model);
        std::int32_t tok = kLlama2cBos;
        for (int pos = 0; pos < n; ++pos) tok = argmax(s.forward(tok, pos), model.config().vocab_size);
        checksum += tok;
      });
      cap.run([&] { checksum += capture(model, opt).meta.token_ids.back(); });
      file.run([&] { write_trace(path, capture(model, opt)); });
    }
    std::remove(path.c_str());
    auto row = [&](const char* what, const Timing& t) {
      char label[64];
      std::snprintf(label, sizeof label, "%s, %d positions", what, n);
      std::printf("%-36s %12.0f %12.0f %10.2fx\n", label, n / t.cpu, n / t.wall, n / t.cpu / kPlainCTokensPerSecond);
    };
    row("forward only", fwd);
    row("capture (recording)", cap);
    row("capture + trace file", file);
    std::printf("  recording overhead: capture / forward throughput = %.3f (CPU time), %.3f (wall)\n",
                fwd.cpu / cap.cpu, fwd.wall / cap.wall);
  }
  std::printf("plain C reference: %.0f tokens/s (issue 4: llama2.c run.c on one core of this machine)\n",
              kPlainCTokensPerSecond);
  std::printf("(checksum %d)\n", checksum);
  return 0;
}
