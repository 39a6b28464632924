// The CUDA runtime: a CUDA graph per (batch, length) bucket (cuda_graphs.h), captured when the instance loads, over
// static device buffers (ids and mask in, the fp32 embedding out). A pass copies its inputs into pinned host memory
// of its own, then queues on the instance's stream: host -> device copies into the bucket's inputs, the graph, the device ->
// host copy of its output, and an event. Start returns once all is queued, so the host collates the next batch
// while the device computes this one; the stream orders passes that share a bucket's buffers, and each pass
// owns its pinned memory until its event has completed.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <cstring>

#include "cuda_graphs.h"
#include "module.h"
#include "runtime.h"

namespace bertserve {
namespace {

// One forward queued on the stream: its pinned buffers and the event that says the output has arrived.
class GraphPass : public Pass {
 public:
  GraphPass(at::Tensor host_in, at::Tensor host_out) : host_in_(std::move(host_in)), host_out_(std::move(host_out)) {
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~GraphPass() override {
    if (!finished_) cudaEventSynchronize(done_);  // the device may still read or write the pinned buffers
    cudaEventDestroy(done_);
  }
  void Record(cudaStream_t stream) { C10_CUDA_CHECK(cudaEventRecord(done_, stream)); }

  void Finish(float* out) override {
    finished_ = true;
    C10_CUDA_CHECK(cudaEventSynchronize(done_));
    std::memcpy(out, host_out_.const_data_ptr<float>(), static_cast<size_t>(host_out_.numel()) * sizeof(float));
  }

 private:
  at::Tensor host_in_, host_out_;  // pinned: [2, batch, seq] ids and mask, [batch, hidden] output
  cudaEvent_t done_ = nullptr;
  bool finished_ = false;
};

class GraphRuntime : public Runtime {
 public:
  GraphRuntime(const ModelSettings& s, const c10::Device& device)
      : Runtime(s.hidden),
        device_(device),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        module_(Module::Load(s, device, /*single_threaded=*/true)),
        graphs_(*module_, device, stream_, 2, s.hidden) {}

  std::unique_ptr<Pass> Start(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq) override {
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStreamGuard stream_guard(stream_);
    GraphShape& g = graphs_.At(batch, seq);
    const size_t count = static_cast<size_t>(batch * seq), bytes = count * sizeof(int64_t);
    // Pinned memory from torch's caching host allocator: after the first batches of a shape, no cudaHostAlloc.
    at::Tensor host_in = at::empty({2, batch, seq}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    at::Tensor host_out = at::empty({batch, hidden_}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    int64_t* in = host_in.mutable_data_ptr<int64_t>();
    std::memcpy(in, ids, bytes);
    std::memcpy(in + count, mask, bytes);
    auto pass = std::make_unique<GraphPass>(host_in, host_out);
    const cudaStream_t stream = stream_.stream();
    C10_CUDA_CHECK(cudaMemcpyAsync(g.inputs[0].mutable_data_ptr(), in, bytes, cudaMemcpyHostToDevice, stream));
    C10_CUDA_CHECK(cudaMemcpyAsync(g.inputs[1].mutable_data_ptr(), in + count, bytes, cudaMemcpyHostToDevice, stream));
    g.graph.replay();
    C10_CUDA_CHECK(cudaMemcpyAsync(host_out.mutable_data_ptr(), g.out.const_data_ptr(),
                                   static_cast<size_t>(batch * hidden_) * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream));
    pass->Record(stream);
    return pass;
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<Module> module_;
  GraphShapes graphs_;  // after module_: destroyed before it
};

}  // namespace

std::unique_ptr<Runtime> LoadGraphRuntime(const ModelSettings& s, const c10::Device& device) {
  return std::make_unique<GraphRuntime>(s, device);
}

}  // namespace bertserve
