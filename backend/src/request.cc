#include "request.h"

#include <algorithm>
#include <cstring>

#include "fault.h"
#include "parameters.h"
#include "response.h"
#include "text_input.h"
#include "triton_util.h"

namespace bertserve {
namespace {

constexpr const char* kIds = "input_ids";
constexpr const char* kMask = "attention_mask";
constexpr const char* kOutput = "embedding";
constexpr const char* kText = "TEXT";
constexpr const char* kTextOutput = "EMBEDDING";
constexpr const char* kTruncatedOutput = "TRUNCATED";
constexpr const char* kTokensOutput = "TOKENS";
constexpr const char* kTruncatedFlag = "truncated";  // a tokenizer model's

RequestError BadShape(const std::string& message) { return {FailureReason::kBadShape, message}; }

// One input of a request as Triton describes it: its type, shape and the size of its buffers.
struct InputView {
  TRITONBACKEND_Input* input = nullptr;
  TRITONSERVER_DataType dtype = TRITONSERVER_TYPE_INVALID;
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
  uint32_t buffer_count = 0;
};

InputView Describe(TRITONBACKEND_Request* request, const char* name) {
  InputView view;
  Check(TRITONBACKEND_RequestInput(request, name, &view.input), name);
  const int64_t* dims = nullptr;
  uint32_t dims_count = 0;
  Check(TRITONBACKEND_InputProperties(view.input, nullptr, &view.dtype, &dims, &dims_count, &view.byte_size,
                                      &view.buffer_count),
        name);
  view.shape.assign(dims, dims + dims_count);
  return view;
}

// The input's buffers, in order, copied to `out` (byte_size bytes: Triton's buffers carry no alignment promise and
// may come in pieces); never more than the byte size Triton declared.
std::optional<RequestError> Gather(const InputView& view, const char* name, char* out) {
  uint64_t copied = 0;
  for (uint32_t b = 0; b < view.buffer_count; ++b) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    Check(TRITONBACKEND_InputBuffer(view.input, b, &buffer, &size, &memory, &memory_id), name);
    if (memory == TRITONSERVER_MEMORY_GPU) return Internal(std::string(name) + " arrived in GPU memory");
    if (copied + size > view.byte_size) return BadShape(std::string(name) + " has more bytes than its shape");
    if (size > 0) std::memcpy(out + copied, buffer, size);
    copied += size;
  }
  if (copied != view.byte_size) return BadShape(std::string(name) + " has fewer bytes than its shape");
  return std::nullopt;
}

// The input's bytes in one piece: Triton's own buffer when it holds them all (no copy), else gathered into `held`.
std::optional<RequestError> Contiguous(const InputView& view, const char* name, std::string* held,
                                       std::string_view* bytes) {
  if (view.buffer_count == 1) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    Check(TRITONBACKEND_InputBuffer(view.input, 0, &buffer, &size, &memory, &memory_id), name);
    if (memory == TRITONSERVER_MEMORY_GPU) return Internal(std::string(name) + " arrived in GPU memory");
    if (size != view.byte_size) return BadShape(std::string(name) + " has a buffer of another size than its shape");
    *bytes = std::string_view(static_cast<const char*>(buffer), size);
    return std::nullopt;
  }
  held->resize(view.byte_size);
  if (auto error = Gather(view, name, held->data())) return error;
  *bytes = *held;
  return std::nullopt;
}

// The element count of a shape, or nullopt when a dimension is negative or the product overflows.
std::optional<uint64_t> Elements(const std::vector<int64_t>& shape) {
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements)) return std::nullopt;
  }
  return elements;
}

// One input of a request as [rows, seq] int64 in `data`, its size checked before a byte is copied (a client may
// declare any shape).
std::optional<RequestError> ReadInput(const InputView& view, const char* name, std::vector<int64_t>* data) {
  if (view.dtype != TRITONSERVER_TYPE_INT64) {
    return BadShape(std::string(name) + " must be INT64, got " + TRITONSERVER_DataTypeString(view.dtype));
  }
  const std::optional<uint64_t> elements = Elements(view.shape);
  uint64_t bytes = 0;
  if (!elements || __builtin_mul_overflow(*elements, sizeof(int64_t), &bytes)) {
    return BadShape(std::string(name) + " has a shape whose size overflows");
  }
  if (view.byte_size != bytes) {
    return BadShape(std::string(name) + " holds " + std::to_string(view.byte_size) + " bytes; its shape needs " +
                    std::to_string(bytes));
  }
  data->resize(*elements);
  return Gather(view, name, reinterpret_cast<char*>(data->data()));
}

// The TEXT elements of a request ([rows, 1] BYTES: each a 4-byte little-endian length, then its bytes), each
// checked as decode_text checks it where it lies (its size first, from its length prefix), and copied only then;
// a bad one is named by its index when the request holds several. TEXT in one buffer (what the frontends give) is
// read in place; in several, it is gathered once first.
std::optional<RequestError> ReadTexts(TRITONBACKEND_Request* request, std::vector<std::string>* texts) {
  const InputView view = Describe(request, kText);
  if (view.dtype != TRITONSERVER_TYPE_BYTES) {
    return BadShape(std::string("TEXT must be BYTES, got ") + TRITONSERVER_DataTypeString(view.dtype));
  }
  const std::optional<uint64_t> count = Elements(view.shape);
  if (view.shape.empty() || view.shape[0] < 1 || !count || *count == 0) return BadShape("TEXT holds no element");
  std::string held;
  std::string_view data;
  if (auto error = Contiguous(view, kText, &held, &data)) return error;
  std::vector<std::string_view> elements;
  size_t at = 0;
  for (uint64_t i = 0; i < *count; ++i) {
    if (data.size() - at < 4) return BadShape("TEXT has fewer elements than its shape");
    uint32_t size = 0;
    for (int k = 3; k >= 0; --k) size = (size << 8) | static_cast<unsigned char>(data[at + static_cast<size_t>(k)]);
    at += 4;
    if (data.size() - at < size) return BadShape("TEXT element " + std::to_string(i) + " is cut short");
    elements.push_back(data.substr(at, size));
    at += size;
  }
  if (at != data.size()) return BadShape("TEXT has more bytes than its elements");
  for (size_t i = 0; i < elements.size(); ++i) {
    if (auto error = CheckText(elements[i])) {
      if (elements.size() > 1) error->message = "TEXT element " + std::to_string(i) + ": " + error->message;
      return error;
    }
  }
  texts->assign(elements.begin(), elements.end());
  return std::nullopt;
}

// Whether the request asks for the output `name`.
bool Requested(TRITONBACKEND_Request* request, std::string_view name) {
  uint32_t count = 0;
  Check(TRITONBACKEND_RequestOutputCount(request, &count), "requested outputs");
  for (uint32_t i = 0; i < count; ++i) {
    const char* output = nullptr;
    Check(TRITONBACKEND_RequestOutputName(request, i, &output), "requested output");
    if (output != nullptr && name == output) return true;
  }
  return false;
}

// A tokenizer model's outputs: the ids and mask [rows, longest], zero-padded, and whether each text was cut.
TRITONSERVER_Error* WriteTokenized(TRITONBACKEND_Response* response, const Pending& p) {
  const int64_t shape[2] = {p.batch.rows(), p.batch.seq()}, flag_shape[2] = {p.rows(), 1};
  const uint64_t bytes = p.ids.size() * sizeof(int64_t);
  TRITONSERVER_Error* e = WriteOutput(response, kIds, TRITONSERVER_TYPE_INT64, shape, p.ids.data(), bytes);
  if (e == nullptr) e = WriteOutput(response, kMask, TRITONSERVER_TYPE_INT64, shape, p.mask.data(), bytes);
  if (e == nullptr) {
    e = WriteOutput(response, kTruncatedFlag, TRITONSERVER_TYPE_BOOL, flag_shape, p.truncated.data(),
                    p.truncated.size());
  }
  return e;
}

}  // namespace

RequestError Internal(const std::string& message) { return {FailureReason::kInternal, message}; }
RequestError Unavailable(FailureReason reason, const std::string& message) { return {reason, message}; }

void Pending::Read(const ModelSettings& s) {
  try {
    if (s.text()) {
      error = ReadTruncate(request, &truncate);
      if (error) return;
      wants_tokens = Requested(request, kTokensOutput);
      error = ReadTexts(request, &texts);
      if (!error) fault_point = fault::PointOf(texts.front());
      return;
    }
    const InputView ids_view = Describe(request, kIds), mask_view = Describe(request, kMask);
    const std::vector<int64_t>& shape = ids_view.shape;
    batch = TokenBatch{shape, mask_view.shape, {}, {}};
    // Shapes first, as Validate orders them, before a byte is copied: a mismatch needs no data to be reported,
    // and a sequence past max_seq is refused by its declared length.
    if (shape.size() != 2 || shape != mask_view.shape) {
      error = Validate(batch, s.vocab_size, s.max_seq, &lengths);
      return;
    }
    if (shape[0] > 0 && shape[1] > s.max_seq) {
      error = RequestError{FailureReason::kTooLong, "sequence of " + std::to_string(shape[1]) +
                                           " tokens is longer than the max length " + std::to_string(s.max_seq)};
      return;
    }
    error = ReadInput(ids_view, kIds, &ids);
    if (!error) error = ReadInput(mask_view, kMask, &mask);
    if (error) return;
    batch = TokenBatch{shape, mask_view.shape, ids, mask};
    error = Validate(batch, s.vocab_size, s.max_seq, &lengths);
  } catch (const std::exception& e) {
    error = Internal(e.what());
  }
}

void Pending::Tokenize(const ModelSettings& s, const tokenizer::Tokenizer& tokenizer) {
  const auto max_len = static_cast<size_t>(s.max_seq);
  std::vector<std::vector<int64_t>> rows(texts.size());
  truncated.assign(texts.size(), 0);
  size_t width = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    truncated[i] = tokenizer.Encode(texts[i], max_len, &rows[i]) ? 1 : 0;
    width = std::max(width, rows[i].size());
    if (truncated[i] && !truncate) {
      error = RequestError{FailureReason::kTooLong, "TEXT is longer than the max length of " + std::to_string(s.max_seq) + " tokens"};
      return;
    }
  }
  const auto n = static_cast<int64_t>(texts.size()), w = static_cast<int64_t>(width);
  ids.assign(texts.size() * width, kPadId);
  mask.assign(texts.size() * width, 0);
  lengths.resize(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(), ids.begin() + static_cast<std::ptrdiff_t>(i * width));
    std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(i * width), rows[i].size(), 1);
    lengths[i] = static_cast<int64_t>(rows[i].size());
  }
  batch = TokenBatch{{n, w}, {n, w}, ids, mask};
}

// The status of a response that failed between its creation and its sending, and its failure counted.
TRITONSERVER_Error* Failed(Pending& p, Metrics& metrics, const char* what) noexcept {
  try {
    p.error = Internal(std::string("responding failed: ") + what);
    metrics.Failure(p.error->reason);
    BERTSERVE_LOG(ERROR, p.error->message);
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, p.error->message.c_str());
  } catch (...) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "responding failed");
  }
}

void Pending::Respond(const ModelSettings& s, Metrics& metrics) noexcept {
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, request)) {
    ErrorPtr owned(e);
    responded = true;  // none can be made: the release tells Triton
    try {
      BERTSERVE_LOG(ERROR, std::string("cannot create a response: ") + TRITONSERVER_ErrorMessage(e));
    } catch (...) {
    }
    return;
  }
  ErrorPtr status;
  try {
    fault::At(fault_point, "respond");
    if (!error && s.tokenize_only()) {
      TRITONSERVER_Error* e = WriteTokenized(response, *this);
      if (e != nullptr) {
        ErrorPtr owned(e);
        error = OutputError(e);
      }
    } else if (!error) {
      const int64_t shape[2] = {rows(), s.hidden};
      TRITONSERVER_Error* e = WriteOutput(response, s.text() ? kTextOutput : kOutput, TRITONSERVER_TYPE_FP32, shape,
                                          embedding.data(), embedding.size() * sizeof(float));
      if (e == nullptr && s.text()) {
        const int64_t flag_shape[2] = {rows(), 1};
        e = WriteOutput(response, kTruncatedOutput, TRITONSERVER_TYPE_BOOL, flag_shape, truncated.data(),
                        truncated.size());
      }
      if (e == nullptr && wants_tokens) {
        const int64_t count_shape[2] = {rows(), 1};
        e = WriteOutput(response, kTokensOutput, TRITONSERVER_TYPE_INT64, count_shape, lengths.data(),
                        lengths.size() * sizeof(int64_t));
      }
      if (e != nullptr) {
        ErrorPtr owned(e);
        error = OutputError(e);
      }
    }
    if (error) {
      status.reset(TRITONSERVER_ErrorNew(CodeOf(*error), error->message.c_str()));
      metrics.Failure(error->reason);
    }
  } catch (const std::exception& e) {
    status.reset(Failed(*this, metrics, e.what()));
  } catch (...) {
    status.reset(Failed(*this, metrics, "unknown exception"));
  }
  // Triton owns the response from here, sent or not: it is never deleted here.
  TRITONSERVER_Error* e = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, status.get());
  responded = true;
  if (e != nullptr) {
    ErrorPtr owned(e);
    try {
      BERTSERVE_LOG(ERROR, std::string("cannot send a response: ") + TRITONSERVER_ErrorMessage(e));
    } catch (...) {
    }
  }
}

void Pending::Fail(RequestError e, TRITONBACKEND_ModelInstance* instance, const ModelSettings& settings,
                   Metrics& metrics) noexcept {
  error = std::move(e);
  if (!responded) Respond(settings, metrics);
  const uint64_t now = NowNs();
  Finish(instance, arrived_ns, now, now, now);
  if (!warmup) metrics.Request(now > arrived_ns ? static_cast<double>(now - arrived_ns) * 1e-9 : 0.0);
}

void Pending::Finish(TRITONBACKEND_ModelInstance* instance, uint64_t exec_start_ns, uint64_t compute_start_ns,
                     uint64_t compute_end_ns, uint64_t exec_end_ns) noexcept {
  if (released) return;
  // Warm-up requests are the server's own, sent before it is ready: they stay out of the statistics the SLO and
  // the traffic panels read (nv_inference_request_success and the bertserve_request_duration_seconds count).
  if (!warmup) {
    ErrorPtr(TRITONBACKEND_ModelInstanceReportStatistics(instance, request, !error, exec_start_ns, compute_start_ns,
                                                         compute_end_ns, exec_end_ns));
  }
  ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
  released = true;
}

Pending::~Pending() {
  if (request == nullptr || released) return;
  if (!responded) {
    TRITONBACKEND_Response* response = nullptr;
    if (TRITONBACKEND_ResponseNew(&response, request) == nullptr) {
      ErrorPtr status(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the request was dropped on an error path"));
      ErrorPtr(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, status.get()));
    }
  }
  ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
}

}  // namespace bertserve
