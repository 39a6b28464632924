// CUDA graphs of one module, one per [batch, seq] shape, over static device buffers: int64 [batch, seq] inputs in,
// a float32 [batch, width] output. A shape is captured on first use on the owner's stream, one capture at a time
// in the process and in thread-local mode: another thread's warm-up allocations and replays stay legal while this
// one captures (the default global mode made them fail, and the failed capture aborted the server). Callers copy
// their inputs into a shape's buffers, replay and copy its output, all on that stream. Used by the embed runtime
// (runtime_cuda.cc: ids and mask) and the sequence tasks' scorer (sequence_scorer_cuda.cc: ids, mask, type ids).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "module.h"

namespace bertserve {

struct GraphShape {
  at::cuda::CUDAGraph graph;
  std::vector<at::Tensor> inputs;  // int64 [batch, seq] each: what the graph reads
  at::Tensor out;                  // float32 [batch, width]: what it writes
};

class GraphShapes {
 public:
  // `inputs`: how many int64 inputs the module takes; `width`: its output's floats per row (0: whatever the first
  // capture returns, which every later one must match).
  GraphShapes(Module& module, c10::Device device, c10::cuda::CUDAStream stream, size_t inputs, int64_t width);
  ~GraphShapes();  // a graph is destroyed under the capture lock too: another instance may be capturing

  // The shape's graph, captured on first use. Throws when the module's output is not [batch, width] (or [batch]
  // where the width is 1). Calls for one object come from one thread at a time.
  GraphShape& At(int64_t batch, int64_t seq);
  int64_t width() const { return width_; }

 private:
  std::unique_ptr<GraphShape> Capture(int64_t batch, int64_t seq);

  Module& module_;
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  size_t inputs_;
  int64_t width_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<GraphShape>> shapes_;
};

}  // namespace bertserve
