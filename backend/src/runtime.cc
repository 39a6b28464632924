#include "runtime.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "triton_util.h"

namespace bertserve {
namespace {

using Inputs = std::vector<at::Tensor>;

// Copies a [batch, hidden] result (any float dtype, any device) into host float32 memory.
void CopyOut(const at::Tensor& result, int64_t batch, int64_t hidden, float* out) {
  at::Tensor host = result.to(at::kCPU, at::kFloat).contiguous();
  if (host.dim() != 2 || host.size(0) != batch || host.size(1) != hidden) {
    throw std::runtime_error("the model returned shape " + c10::str(host.sizes()) + ", expected [" +
                             std::to_string(batch) + ", " + std::to_string(hidden) + "]");
  }
  std::copy_n(host.const_data_ptr<float>(), batch * hidden, out);
}

class TorchRuntime : public Runtime {
 public:
  TorchRuntime(const ModelSettings& s, const std::string& device) : Runtime(s.hidden), device_(device) {}

  void Run(const int64_t* ids, const int64_t* mask, int64_t batch, int64_t seq, float* out) override {
    c10::InferenceMode guard;
    auto options = at::TensorOptions().dtype(at::kLong);
    // from_blob does not copy; the model reads the host buffers (or copies them to the device) during Forward.
    at::Tensor t_ids = torch::from_blob(const_cast<int64_t*>(ids), {batch, seq}, options).to(device_);
    at::Tensor t_mask = torch::from_blob(const_cast<int64_t*>(mask), {batch, seq}, options).to(device_);
    CopyOut(Forward({t_ids, t_mask}), batch, hidden_, out);
  }

 protected:
  virtual at::Tensor Forward(Inputs inputs) = 0;
  c10::Device device_;
};

class AotiRuntime : public TorchRuntime {
 public:
  AotiRuntime(const ModelSettings& s, const std::string& device)
      : TorchRuntime(s, device),
        loader_(s.artifact.string(), "model", /*run_single_threaded=*/false, /*num_runners=*/1,
                device_.is_cuda() ? device_.index() : -1) {}

 protected:
  at::Tensor Forward(Inputs inputs) override {
    auto outputs = loader_.run(inputs);
    if (outputs.empty()) throw std::runtime_error("the AOTInductor package returned no output");
    return outputs[0];
  }

 private:
  torch::inductor::AOTIModelPackageLoader loader_;
};

class ScriptRuntime : public TorchRuntime {
 public:
  ScriptRuntime(const ModelSettings& s, const std::string& device)
      : TorchRuntime(s, device), module_(torch::jit::load(s.artifact.string(), device_)) {
    module_.eval();
  }

 protected:
  at::Tensor Forward(Inputs inputs) override {
    return module_.forward({std::move(inputs[0]), std::move(inputs[1])}).toTensor();
  }

 private:
  torch::jit::Module module_;
};

}  // namespace

std::unique_ptr<Runtime> Runtime::Load(const ModelSettings& s, const std::string& device) {
  try {
    if (s.runtime == "aoti") return std::make_unique<AotiRuntime>(s, device);
    return std::make_unique<ScriptRuntime>(s, device);
  } catch (const std::exception& e) {
    throw BackendError(TRITONSERVER_ERROR_INTERNAL,
                       s.name + ": cannot load " + s.runtime + " artifact " + s.artifact.string() + ": " + e.what());
  }
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
