#include "module.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

namespace bertserve {
namespace {

class AotiModule : public Module {
 public:
  AotiModule(const ModelSettings& s, const c10::Device& device, bool single_threaded)
      : loader_(s.artifact.string(), "model", single_threaded, /*num_runners=*/1,
                device.is_cuda() ? device.index() : -1) {}

  at::Tensor Forward(std::vector<at::Tensor> inputs, void* stream) override {
    auto outputs = loader_.run(inputs, stream);
    if (outputs.empty()) throw std::runtime_error("the AOTInductor package returned no output");
    return outputs[0];
  }

 private:
  torch::inductor::AOTIModelPackageLoader loader_;
};

class ScriptModule : public Module {
 public:
  ScriptModule(const ModelSettings& s, const c10::Device& device) : module_(torch::jit::load(s.artifact.string(), device)) {
    module_.eval();
  }

  at::Tensor Forward(std::vector<at::Tensor> inputs, void* /*stream: the current one*/) override {
    return module_.forward({std::move(inputs[0]), std::move(inputs[1])}).toTensor();
  }

 private:
  torch::jit::Module module_;
};

}  // namespace

std::unique_ptr<Module> Module::Load(const ModelSettings& s, const c10::Device& device, bool single_threaded) {
  if (s.runtime == "aoti") return std::make_unique<AotiModule>(s, device, single_threaded);
  return std::make_unique<ScriptModule>(s, device);
}

}  // namespace bertserve
