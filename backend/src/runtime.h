// Runs the artifact a manifest names (AOTInductor package or TorchScript) through libtorch; never compiles.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "settings.h"

namespace bertserve {

// One forward in flight: started by Runtime::Start, its output collected by Finish.
class Pass {
 public:
  virtual ~Pass() = default;  // waits for the device if Finish never ran
  // Waits for the forward and writes its [batch, hidden] float32 output to `out`. Throws on failure.
  virtual void Finish(float* out) = 0;
};

class Runtime {
 public:
  // Loads the (already verified) artifact onto the device: "cpu" or "cuda:N".
  static std::unique_ptr<Runtime> Load(const ModelSettings& settings, const std::string& device);
  virtual ~Runtime() = default;

  // Starts a forward of [batch, seq] int64 ids and mask in host memory (copied before it returns). On the CPU the
  // forward runs here; on CUDA it is queued on the instance's stream behind the passes started before it, so the
  // host can collate the next batch while the device computes. Throws on failure (the caller fails the requests
  // of this pass alone). Passes of one runtime start from one thread at a time.
  virtual std::unique_ptr<Pass> Start(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq) = 0;
  // Start, then Finish.
  void Run(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq, float* out);

  // Measures (and, on CUDA, captures) each [batch, seq] shape: median seconds per call, for the cost model.
  double Warm(int64_t batch, int64_t seq, int timed_calls);

 protected:
  explicit Runtime(int64_t hidden) : hidden_(hidden) {}
  int64_t hidden_;
};

}  // namespace bertserve
