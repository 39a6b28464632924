// A C surface over the backend's pure logic, for the tests that hold it against serving/batching.py (ctypes).
// Built as libbertserve_core.so; never loaded by tritonserver.
#include <cstring>
#include <memory>

#include "batching.h"

using namespace bertserve;

namespace {

void CopyOut(const std::string& s, char* out, size_t cap) {
  if (cap == 0) return;
  const size_t n = std::min(s.size(), cap - 1);
  std::memcpy(out, s.data(), n);
  out[n] = '\0';
}

struct Session {
  std::vector<std::unique_ptr<TokenBatch>> batches;
  std::vector<ValidRequest> requests;
  Collated collated;
};

}  // namespace

extern "C" {

// 0: valid (lengths written); 1: rejected (reason and message written).
__attribute__((visibility("default"))) int bertserve_validate(
    const int64_t* ids, const int64_t* ids_shape, size_t ids_ndim, const int64_t* mask, const int64_t* mask_shape,
    size_t mask_ndim, int64_t vocab_size, int64_t max_seq, int64_t* lengths, char* reason, size_t reason_cap,
    char* message, size_t message_cap) {
  TokenBatch b{{ids_shape, ids_shape + ids_ndim}, {mask_shape, mask_shape + mask_ndim}, {}, {}};
  int64_t n = 1;
  for (size_t i = 0; i < ids_ndim; ++i) n *= ids_shape[i];
  b.ids = {ids, static_cast<size_t>(n)};
  b.mask = {mask, b.ids_shape == b.mask_shape ? static_cast<size_t>(n) : 0};
  std::vector<int64_t> out;
  auto error = Validate(b, vocab_size, max_seq, &out);
  if (error) {
    CopyOut(error->reason, reason, reason_cap);
    CopyOut(error->message, message, message_cap);
    return 1;
  }
  std::copy(out.begin(), out.end(), lengths);
  return 0;
}

__attribute__((visibility("default"))) void* bertserve_session_new() { return new Session; }
__attribute__((visibility("default"))) void bertserve_session_free(void* s) { delete static_cast<Session*>(s); }

// Adds a valid request ([rows, seq] ids and mask, each row's effective length) under the given index.
__attribute__((visibility("default"))) void bertserve_session_add(
    void* handle, size_t index, const int64_t* ids, const int64_t* mask, int64_t rows, int64_t seq,
    const int64_t* lengths) {
  auto* s = static_cast<Session*>(handle);
  const auto n = static_cast<size_t>(rows * seq);
  s->batches.push_back(std::make_unique<TokenBatch>(
      TokenBatch{{rows, seq}, {rows, seq}, std::span<const int64_t>(ids, n), std::span<const int64_t>(mask, n)}));
  s->requests.push_back({index, s->batches.back().get(), {lengths, lengths + rows}});
}

// Collates what was added; costs (batch_bucket x len_bucket, row-major) may be null. Returns the group count.
__attribute__((visibility("default"))) size_t bertserve_session_collate(
    void* handle, const int64_t* len_buckets, size_t n_len, const int64_t* batch_buckets, size_t n_batch,
    const double* costs) {
  auto* s = static_cast<Session*>(handle);
  std::vector<int64_t> lens(len_buckets, len_buckets + n_len), batches(batch_buckets, batch_buckets + n_batch);
  Costs table;
  if (costs != nullptr) {
    for (size_t b = 0; b < n_batch; ++b)
      for (size_t l = 0; l < n_len; ++l) table[{batches[b], lens[l]}] = costs[b * n_len + l];
  }
  s->collated = Collate(s->requests, lens, batches, costs != nullptr ? &table : nullptr);
  return s->collated.groups.size();
}

__attribute__((visibility("default"))) void bertserve_session_tokens(void* handle, int64_t* real, int64_t* padded) {
  auto* s = static_cast<Session*>(handle);
  *real = s->collated.real_tokens;
  *padded = s->collated.padded_tokens;
}

// Group g: its shape, and pointers to its ids, mask and (request, row) pairs (valid until the session is freed).
__attribute__((visibility("default"))) void bertserve_session_group(
    void* handle, size_t g, int64_t* batch, int64_t* seq, const int64_t** ids, const int64_t** mask,
    size_t* n_rows, int64_t* rows_out) {
  const Group& group = static_cast<Session*>(handle)->collated.groups.at(g);
  *batch = group.batch;
  *seq = group.seq;
  *ids = group.ids.data();
  *mask = group.mask.data();
  *n_rows = group.rows.size();
  if (rows_out != nullptr) {
    for (size_t i = 0; i < group.rows.size(); ++i) {
      rows_out[2 * i] = static_cast<int64_t>(group.rows[i].first);
      rows_out[2 * i + 1] = group.rows[i].second;
    }
  }
}

}  // extern "C"
