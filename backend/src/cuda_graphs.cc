#include "cuda_graphs.h"

#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace bertserve {
namespace {

// Triton loads instances (of one model and of several) on parallel threads: one capture at a time in the process.
std::mutex capture_mutex;

}  // namespace

GraphShapes::GraphShapes(Module& module, c10::Device device, c10::cuda::CUDAStream stream, size_t inputs,
                         int64_t width)
    : module_(module), device_(device), stream_(stream), inputs_(inputs), width_(width) {}

GraphShapes::~GraphShapes() {
  stream_.synchronize();
  std::lock_guard<std::mutex> one_capture(capture_mutex);
  shapes_.clear();
}

GraphShape& GraphShapes::At(int64_t batch, int64_t seq) {
  auto it = shapes_.find({batch, seq});
  if (it != shapes_.end()) return *it->second;
  return *shapes_.emplace(std::make_pair(batch, seq), Capture(batch, seq)).first->second;
}

std::unique_ptr<GraphShape> GraphShapes::Capture(int64_t batch, int64_t seq) {
  c10::InferenceMode inference;
  c10::cuda::CUDAGuard device_guard(device_);
  c10::cuda::CUDAStreamGuard stream_guard(stream_);  // never capture on the legacy default stream
  auto g = std::make_unique<GraphShape>();
  for (size_t i = 0; i < inputs_; ++i) {
    g->inputs.push_back(at::ones({batch, seq}, at::TensorOptions().dtype(at::kLong).device(device_)));
  }
  for (int i = 0; i < 2; ++i) module_.Forward(g->inputs, stream_.stream());  // allocations settle
  stream_.synchronize();
  std::lock_guard<std::mutex> one_capture(capture_mutex);
  g->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  const at::Tensor returned = module_.Forward(g->inputs, stream_.stream()).to(at::kFloat);
  g->out = (returned.dim() == 1 ? returned.unsqueeze(1) : returned).contiguous();  // [batch]: one score a row
  g->graph.capture_end();
  if (width_ == 0 && g->out.dim() == 2) width_ = g->out.size(1);
  if (g->out.dim() != 2 || g->out.size(0) != batch || g->out.size(1) != width_) {
    throw std::runtime_error("the model returned shape " + c10::str(returned.sizes()) + ", expected [" +
                             std::to_string(batch) + ", " + std::to_string(width_) + "]");
  }
  return g;
}

}  // namespace bertserve
