// The loaded artifact as one callable: [batch, seq] int64 ids and mask on the device -> [batch, hidden] embedding.
// Private to the runtimes (it is the only header besides them that includes libtorch).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "settings.h"

namespace bertserve {

class Module {
 public:
  // The AOTInductor package or TorchScript file the settings name, on `device`. `single_threaded`: the
  // AOTInductor container runs without its own threads (a CUDA graph capture forbids their event polling).
  static std::unique_ptr<Module> Load(const ModelSettings& settings, const c10::Device& device, bool single_threaded);
  virtual ~Module() = default;
  // `stream`: the cudaStream_t to run on (nullptr: the current one).
  virtual at::Tensor Forward(std::vector<at::Tensor> inputs, void* stream) = 0;
};

}  // namespace bertserve
