// The sequence tasks' scorer on CUDA: a CUDA graph per (batch, length) bucket (cuda_graphs.h), every one captured
// when the instance loads, as the embed runtime's. A chunk's rows are padded into its bucket (padding rows and
// tokens masked out), copied through pinned memory, replayed on the instance's stream and read back: no kernel is
// launched from the host per forward, which bounded the eager package (about 200 launches a forward).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "batching.h"
#include "cuda_graphs.h"
#include "module.h"
#include "sequence_scorer.h"

namespace bertserve {
namespace {

constexpr size_t kInputs = 3;  // input_ids, attention_mask, token_type_ids

class GraphScorer : public RowScorer {
 public:
  GraphScorer(const ModelSettings& s, const c10::Device& device)
      : device_(device),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        module_(Module::Load(s, device, /*single_threaded=*/true)),
        graphs_(*module_, device, stream_, kInputs, 0),
        batch_buckets_(BatchBuckets(s.max_batch)),
        length_buckets_(LengthBuckets(s.max_seq)) {
    for (int64_t b : batch_buckets_)
      for (int64_t l : length_buckets_) graphs_.At(b, l);
  }

  void Score(const RowChunk& c, int64_t width, float* out) override {
    if (width != graphs_.width()) {
      throw std::runtime_error("the model gives " + std::to_string(graphs_.width()) + " outputs a row, expected " +
                               std::to_string(width));
    }
    const int64_t batch = BucketFor(c.rows, batch_buckets_), seq = BucketFor(c.seq, length_buckets_);
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStreamGuard stream_guard(stream_);
    GraphShape& g = graphs_.At(batch, seq);
    const size_t plane = static_cast<size_t>(batch * seq);
    // Zeros: padding rows and tokens are masked out (and their ids are [PAD], type 0).
    at::Tensor host_in = at::zeros({static_cast<int64_t>(kInputs), batch, seq},
                                   at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    at::Tensor host_out = at::empty({batch, width}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    int64_t* in = host_in.mutable_data_ptr<int64_t>();
    const std::vector<int64_t>* planes[kInputs] = {&c.ids, &c.mask, &c.types};
    for (size_t k = 0; k < kInputs; ++k) {
      for (int64_t r = 0; r < c.rows; ++r) {
        std::memcpy(in + k * plane + static_cast<size_t>(r * seq), planes[k]->data() + r * c.seq,
                    static_cast<size_t>(c.seq) * sizeof(int64_t));
      }
    }
    const cudaStream_t stream = stream_.stream();
    for (size_t k = 0; k < kInputs; ++k) {
      C10_CUDA_CHECK(cudaMemcpyAsync(g.inputs[k].mutable_data_ptr(), in + k * plane, plane * sizeof(int64_t),
                                     cudaMemcpyHostToDevice, stream));
    }
    g.graph.replay();
    C10_CUDA_CHECK(cudaMemcpyAsync(host_out.mutable_data_ptr(), g.out.const_data_ptr(),
                                   static_cast<size_t>(batch * width) * sizeof(float), cudaMemcpyDeviceToHost, stream));
    C10_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::memcpy(out, host_out.const_data_ptr<float>(), static_cast<size_t>(c.rows * width) * sizeof(float));
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<Module> module_;
  GraphShapes graphs_;  // after module_: destroyed before it
  std::vector<int64_t> batch_buckets_, length_buckets_;
};

}  // namespace

std::unique_ptr<RowScorer> LoadGraphScorer(const ModelSettings& s, const c10::Device& device) {
  return std::make_unique<GraphScorer>(s, device);
}

}  // namespace bertserve
