#include "classify_request.h"

#include <algorithm>
#include <cmath>

namespace bertserve {

std::vector<float> Softmax(const std::vector<float>& logits, size_t width) {
  std::vector<float> out(logits.size());
  for (size_t at = 0; at + width <= logits.size(); at += width) {
    const float top = *std::max_element(logits.begin() + static_cast<std::ptrdiff_t>(at),
                                        logits.begin() + static_cast<std::ptrdiff_t>(at + width));
    float sum = 0.0f;
    for (size_t k = 0; k < width; ++k) sum += out[at + k] = std::exp(logits[at + k] - top);
    for (size_t k = 0; k < width; ++k) out[at + k] /= sum;
  }
  return out;
}

void ClassifyRequest::Read(const ClassifyLimits& limits) noexcept {
  try {
    error = ReadPairParameters(this);
    const auto max_rows = static_cast<uint64_t>(limits.max_rows);
    if (!error) error = ReadStrings(request, "TEXT", max_rows, &text);
    if (!error && HasInput(request, "TEXT_PAIR")) {
      error = ReadStrings(request, "TEXT_PAIR", max_rows, &pair);
      if (!error && pair.size() != text.size()) {
        error = RequestError{FailureReason::kBadShape, "TEXT_PAIR holds " + std::to_string(pair.size()) + " element(s) and TEXT " +
                                              std::to_string(text.size()) + ": one pair text per text"};
      }
    }
  } catch (const std::exception& e) {
    error = RequestError{FailureReason::kInternal, e.what()};
  }
}

void ClassifyRequest::Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
                             uint64_t compute_end_ns) noexcept {
  SendResponse(*this, instance, metrics, compute_start_ns, compute_end_ns, [&](TRITONBACKEND_Response* response) {
    const size_t width = labels.size();
    const auto rows = static_cast<int64_t>(text.size());
    const std::vector<float> probabilities = Softmax(logits, width);
    std::string names;  // BYTES: each label's 4-byte little-endian length, then its bytes
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = probabilities.begin() + r * static_cast<std::ptrdiff_t>(width);
      const std::string& name = labels[static_cast<size_t>(std::max_element(row, row + static_cast<std::ptrdiff_t>(width)) - row)];
      const auto size = static_cast<uint32_t>(name.size());
      for (int k = 0; k < 4; ++k) names.push_back(static_cast<char>((size >> (8 * k)) & 0xff));
      names += name;
    }
    const int64_t shape[2] = {rows, static_cast<int64_t>(width)}, label_shape[2] = {rows, 1};
    const uint64_t bytes = logits.size() * sizeof(float);
    TRITONSERVER_Error* e = WriteOutput(response, "LOGITS", TRITONSERVER_TYPE_FP32, shape, logits.data(), bytes);
    if (e == nullptr) {
      e = WriteOutput(response, "PROBABILITIES", TRITONSERVER_TYPE_FP32, shape, probabilities.data(), bytes);
    }
    if (e == nullptr) e = WriteOutput(response, "LABEL", TRITONSERVER_TYPE_BYTES, label_shape, names.data(), names.size());
    return e;
  });
}

}  // namespace bertserve
