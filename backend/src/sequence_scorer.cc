#include "sequence_scorer.h"

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "module.h"
#include "triton_util.h"

namespace bertserve {
namespace {

class ModuleScorer : public RowScorer {
 public:
  ModuleScorer(const ModelSettings& s, const c10::Device& device)
      : device_(device), module_(Module::Load(s, device, false)) {}

  void Score(const RowChunk& c, int64_t width, float* out) override {
    if (device_.is_cuda()) {  // a serving thread of the instance's own starts on device 0
      c10::DeviceGuard device_guard(device_);
      Forward(c, width, out);
    } else {
      Forward(c, width, out);
    }
  }

 private:
  void Forward(const RowChunk& c, int64_t width, float* out) {
    c10::InferenceMode guard;
    const auto options = at::TensorOptions().dtype(at::kLong);
    auto input = [&](const std::vector<int64_t>& v) {
      return torch::from_blob(const_cast<int64_t*>(v.data()), {c.rows, c.seq}, options).to(device_);
    };
    at::Tensor scores = module_->Forward({input(c.ids), input(c.mask), input(c.types)}, nullptr)
                            .to(at::kCPU)
                            .to(at::kFloat)
                            .contiguous();
    const bool one = scores.dim() == 1 && width == 1 && scores.size(0) == c.rows;
    if (!one && (scores.dim() != 2 || scores.size(0) != c.rows || scores.size(1) != width)) {
      throw std::runtime_error("the model returned shape " + c10::str(scores.sizes()) + ", expected [" +
                               std::to_string(c.rows) + ", " + std::to_string(width) + "]");
    }
    std::copy_n(scores.const_data_ptr<float>(), c.rows * width, out);
  }

  c10::Device device_;
  std::unique_ptr<Module> module_;
};

}  // namespace

double RowScorer::Time(int64_t batch, int64_t seq, int64_t width, int timed_calls) {
  RowChunk c;
  c.rows = batch, c.seq = seq;
  c.ids.assign(static_cast<size_t>(batch * seq), 1);
  c.mask.assign(c.ids.size(), 1);
  c.types.assign(c.ids.size(), 0);
  std::vector<float> out(static_cast<size_t>(batch * width));
  std::vector<double> times;
  for (int i = 0; i <= timed_calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Score(c, width, out.data());
    if (i > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (times.empty()) return 0.0;
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

#ifdef BERTSERVE_CUDA
std::unique_ptr<RowScorer> LoadGraphScorer(const ModelSettings& s, const c10::Device& device);  // sequence_scorer_cuda.cc
#endif

std::unique_ptr<RowScorer> RowScorer::Load(const ModelSettings& s, const std::string& device) {
  if (s.runtime != "aoti") {
    throw BackendError(TRITONSERVER_ERROR_INVALID_ARG,
                       s.name + ": the rerank and classify tasks load an AOTInductor package, not " + s.runtime);
  }
  try {
    const c10::Device d(device);
#ifdef BERTSERVE_CUDA
    if (d.is_cuda() && s.cuda_graphs) return LoadGraphScorer(s, d);
#endif
    return std::make_unique<ModuleScorer>(s, d);
  } catch (const std::exception& e) {
    throw BackendError(TRITONSERVER_ERROR_INTERNAL,
                       s.name + ": cannot load " + s.artifact.string() + " on " + device + ": " + e.what());
  }
}

}  // namespace bertserve
