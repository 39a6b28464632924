// Validate one request's token ids and collate valid rows into padded length / batch buckets.
// Plain C++ with no Triton or torch types; serving/python_backend/batching.py is the reference it must agree with.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace bertserve {

inline constexpr int64_t kPadId = 0;

// Why a request failed, one value per failure class: its name labels bertserve_failures_total{reason} and its
// kind decides the status. Every failure reason of the backend is here, and the metrics count each by its own name.
enum class FailureReason {
  kTooLong,
  kBadTokenId,
  kBadAttentionMask,
  kBadShape,
  kQueueFull,
  kQueueTimeout,
  kInternal,
  kTextTooLarge,
  kInvalidUtf8,
  kEmptyText,
  kBadParameter,
  kBadOutput,
};
inline constexpr size_t kFailureReasonCount = static_cast<size_t>(FailureReason::kBadOutput) + 1;

// The reason's label in the metrics ("too_long", "queue_full", ...).
const char* FailureName(FailureReason reason);

// A request the model rejects: `reason` labels the failure counter and decides the status (kind()), `message`
// goes to the client.
struct RequestError {
  // bad input (INVALID_ARGUMENT), refused to protect the others (UNAVAILABLE), or the backend's own failure
  // (INTERNAL)
  enum class Kind { kBadInput, kRefused, kInternal };
  FailureReason reason;
  std::string message;

  Kind kind() const;
};

// One request's [rows, seq] input_ids and attention_mask, row-major, in memory the caller owns.
struct TokenBatch {
  std::vector<int64_t> ids_shape;
  std::vector<int64_t> mask_shape;
  std::span<const int64_t> ids;
  std::span<const int64_t> mask;
  int64_t rows() const { return ids_shape.size() == 2 ? ids_shape[0] : 0; }
  int64_t seq() const { return ids_shape.size() == 2 ? ids_shape[1] : 0; }
};

// 16, 32, 48, 64, 96, 128, ...: doubling, with the midpoint of each step from 32 on (a row pads by at most a
// third past 32 tokens, not a half), up to max_seq (always included).
std::vector<int64_t> LengthBuckets(int64_t max_seq);
// 1, 2, 4, ... up to max_batch (always included).
std::vector<int64_t> BatchBuckets(int64_t max_batch);
// The smallest bucket that holds `value` (the caller guarantees one does).
int64_t BucketFor(int64_t value, const std::vector<int64_t>& buckets);

// Each row's effective length (through its last 1 in the mask), or the error that names what is wrong.
// The spans must hold the element counts their shapes give (the caller checked the byte sizes).
std::optional<RequestError> Validate(
    const TokenBatch& batch, int64_t vocab_size, int64_t max_seq, std::vector<int64_t>* lengths);

// (batch bucket, length bucket) -> seconds per forward pass, measured at load (CUDA graphs).
using Costs = std::map<std::pair<int64_t, int64_t>, double>;

// One forward pass: rows of one or more adjacent length buckets, padded to [batch rows, seq].
struct Group {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<int64_t> ids;   // [batch, seq]
  std::vector<int64_t> mask;  // [batch, seq]
  std::vector<std::pair<size_t, int64_t>> rows;  // (request index, row index) of each real row
};

struct Collated {
  std::vector<Group> groups;
  int64_t real_tokens = 0;
  int64_t padded_tokens = 0;
  double padding_ratio() const;
};

// A valid request: its tokens and the effective length of each row.
struct ValidRequest {
  size_t index;
  const TokenBatch* batch;
  std::vector<int64_t> lengths;
};

// Partition the length buckets in use (rows per bucket) into runs that each become one pass, cheapest in total.
std::vector<std::vector<int64_t>> MergeBuckets(
    const std::map<int64_t, int64_t>& rows, const std::vector<int64_t>& batch_buckets, const Costs& costs);

// Group rows by length bucket; with batch buckets, pad each group's row count to one (CUDA graphs), and with
// costs let adjacent length buckets share a pass where that is cheaper.
Collated Collate(
    const std::vector<ValidRequest>& requests, const std::vector<int64_t>& len_buckets,
    const std::vector<int64_t>& batch_buckets, const Costs* costs);

}  // namespace bertserve
