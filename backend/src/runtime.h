// Runs the artifact a manifest names (AOTInductor package or TorchScript) through libtorch; never compiles.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "settings.h"

namespace bertserve {

class Runtime {
 public:
  // Loads the (already verified) artifact onto the device: "cpu" or "cuda:N".
  static std::unique_ptr<Runtime> Load(const ModelSettings& settings, const std::string& device);
  virtual ~Runtime() = default;

  // [batch, seq] int64 ids and mask in host memory -> [batch, hidden] float32 embeddings written to `out`.
  // Throws on failure (the caller fails the requests of this batch alone).
  virtual void Run(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq, float* out) = 0;

  // Measures (and, on CUDA, captures) each [batch, seq] shape: median seconds per call, for Collate's costs.
  double Warm(int64_t batch, int64_t seq, int timed_calls);

 protected:
  explicit Runtime(int64_t hidden) : hidden_(hidden) {}
  int64_t hidden_;
};

}  // namespace bertserve
