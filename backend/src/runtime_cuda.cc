// The CUDA runtime: a CUDA graph per (batch, length) bucket, captured when the instance loads, holding the
// copies too (pinned host inputs -> device, the model, the fp32 cast, device -> pinned host output). A call is
// two host memcpys, one graph launch and one stream synchronize, on the instance's own stream.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <mutex>

#include "module.h"
#include "runtime.h"

namespace bertserve {
namespace {

// Triton loads instances (of one model and of several) on parallel threads. One capture at a time in the process,
// each in thread-local mode: another thread's warm-up allocations and replays stay legal while this one captures
// (the default global mode made them fail, and the failed capture aborted the server).
std::mutex capture_mutex;

class GraphRuntime : public Runtime {
 public:
  GraphRuntime(const ModelSettings& s, const c10::Device& device)
      : Runtime(s.hidden),
        device_(device),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        module_(Module::Load(s, device, /*single_threaded=*/true)) {}

  // A graph is destroyed under the capture lock too: another instance may be capturing while this one unloads.
  ~GraphRuntime() override {
    std::lock_guard<std::mutex> one_capture(capture_mutex);
    buckets_.clear();
  }

  void Run(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq, float* out) override {
    Bucket& b = BucketFor(batch, seq);
    const size_t bytes = static_cast<size_t>(batch * seq) * sizeof(int64_t);
    std::memcpy(b.host_ids.data_ptr<int64_t>(), ids, bytes);
    std::memcpy(b.host_mask.data_ptr<int64_t>(), mask, bytes);
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStreamGuard stream_guard(stream_);
    b.graph.replay();
    // Before the host touches the pinned buffers again (this output, the next inputs).
    stream_.synchronize();
    std::memcpy(out, b.host_out.const_data_ptr<float>(), static_cast<size_t>(batch * hidden_) * sizeof(float));
  }

 private:
  struct Bucket {
    at::cuda::CUDAGraph graph;
    at::Tensor host_ids, host_mask, host_out;  // pinned
    at::Tensor ids, mask;                      // the graph's static device inputs, alive as long as it is
  };

  Bucket& BucketFor(int64_t batch, int64_t seq) {
    auto it = buckets_.find({batch, seq});
    if (it != buckets_.end()) return *it->second;
    return *buckets_.emplace(std::make_pair(batch, seq), Capture(batch, seq)).first->second;
  }

  std::unique_ptr<Bucket> Capture(int64_t batch, int64_t seq) {
    c10::InferenceMode inference;
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStreamGuard stream_guard(stream_);  // never capture on the legacy default stream
    auto b = std::make_unique<Bucket>();
    const auto pinned = at::TensorOptions().dtype(at::kLong).pinned_memory(true);
    b->host_ids = at::empty({batch, seq}, pinned);
    b->host_mask = at::empty({batch, seq}, pinned);
    b->host_out = at::empty({batch, hidden_}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    b->ids = at::ones({batch, seq}, at::TensorOptions().dtype(at::kLong).device(device_));
    b->mask = at::ones({batch, seq}, at::TensorOptions().dtype(at::kLong).device(device_));
    for (int i = 0; i < 2; ++i) module_->Forward({b->ids, b->mask}, stream_.stream());  // allocations settle
    stream_.synchronize();
    // Same dtype and contiguous on both sides, so each copy_ is one captured memcpy.
    std::lock_guard<std::mutex> one_capture(capture_mutex);
    b->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    b->ids.copy_(b->host_ids, /*non_blocking=*/true);
    b->mask.copy_(b->host_mask, /*non_blocking=*/true);
    b->host_out.copy_(module_->Forward({b->ids, b->mask}, stream_.stream()).to(at::kFloat), /*non_blocking=*/true);
    b->graph.capture_end();
    return b;
  }

  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<Module> module_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Bucket>> buckets_;
};

}  // namespace

std::unique_ptr<Runtime> LoadGraphRuntime(const ModelSettings& s, const c10::Device& device) {
  return std::make_unique<GraphRuntime>(s, device);
}

}  // namespace bertserve
