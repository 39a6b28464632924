#include "runtime.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "module.h"
#include "triton_util.h"

namespace bertserve {
namespace {

// A CPU forward has run by the time Start returns: its pass holds the result.
class HostPass : public Pass {
 public:
  explicit HostPass(at::Tensor result) : result_(std::move(result)) {}
  void Finish(float* out) override { std::copy_n(result_.const_data_ptr<float>(), result_.numel(), out); }

 private:
  at::Tensor result_;
};

// On the CPU the model reads the collated host buffers in place (on a compute pool thread: compute_pool.h).
class HostRuntime : public Runtime {
 public:
  explicit HostRuntime(const ModelSettings& s)
      : Runtime(s.hidden), module_(Module::Load(s, c10::Device(c10::kCPU), false)) {}

  std::unique_ptr<Pass> Start(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq) override {
    c10::InferenceMode guard;
    auto options = at::TensorOptions().dtype(at::kLong);
    at::Tensor t_ids = torch::from_blob(const_cast<int64_t*>(ids), {batch, seq}, options);
    at::Tensor t_mask = torch::from_blob(const_cast<int64_t*>(mask), {batch, seq}, options);
    at::Tensor result = module_->Forward({t_ids, t_mask}, nullptr).to(at::kFloat).contiguous();
    if (result.dim() != 2 || result.size(0) != batch || result.size(1) != hidden_) {
      throw std::runtime_error("the model returned shape " + c10::str(result.sizes()) + ", expected [" +
                               std::to_string(batch) + ", " + std::to_string(hidden_) + "]");
    }
    return std::make_unique<HostPass>(std::move(result));
  }

 private:
  std::unique_ptr<Module> module_;
};

}  // namespace

#ifdef BERTSERVE_CUDA
std::unique_ptr<Runtime> LoadGraphRuntime(const ModelSettings& s, const c10::Device& device);  // runtime_cuda.cc
#endif

std::unique_ptr<Runtime> Runtime::Load(const ModelSettings& s, const std::string& device) {
  try {
    const c10::Device d(device);
    if (d.is_cpu()) return std::make_unique<HostRuntime>(s);
#ifdef BERTSERVE_CUDA
    return LoadGraphRuntime(s, d);
#else
    throw std::runtime_error("this build of the backend has no CUDA (its torch is a CPU build)");
#endif
  } catch (const std::exception& e) {
    throw BackendError(TRITONSERVER_ERROR_INTERNAL, s.name + ": cannot load " + s.runtime + " artifact " +
                                                        s.artifact.string() + " on " + device + ": " + e.what());
  }
}

void Runtime::Run(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq, float* out) {
  Start(ids, mask, batch, seq)->Finish(out);
}

double Runtime::Warm(int64_t batch, int64_t seq, int timed_calls) {
  std::vector<int64_t> ones(batch * seq, 1);
  std::vector<float> out(batch * hidden_);
  std::vector<double> times;
  for (int i = 0; i <= timed_calls; ++i) {
    auto start = std::chrono::steady_clock::now();
    Run(ones.data(), ones.data(), batch, seq, out.data());
    if (i > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (times.empty()) return 0.0;
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace bertserve
