// A C surface over the backend's pure logic, for the tests that hold it against serving/python_backend/batching.py and the
// Hugging Face tokenizer (ctypes). Built as libbertserve_core.so; never loaded by tritonserver. No exception
// crosses it: a failure is a return value and a message.
#include <cstring>
#include <memory>
#include <string>

#include "batching.h"
#include "cost_model.h"
#include "work_queue.h"
#include "text_input.h"
#include "tokenizer/tokenizer.h"

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
    CopyOut(FailureName(error->reason), reason, reason_cap);
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

// The failure reason number `index`: 0 with its name and kind (0 bad input, 1 refused, 2 internal) written;
// 1 past the last.
__attribute__((visibility("default"))) int bertserve_failure_reason(size_t index, char* name, size_t name_cap,
                                                                    int* kind) {
  if (index >= kFailureReasonCount) return 1;
  const RequestError error{static_cast<FailureReason>(index), ""};
  CopyOut(FailureName(error.reason), name, name_cap);
  *kind = static_cast<int>(error.kind());
  return 0;
}

// 0: a valid TEXT element; 1: rejected (reason and message written).
__attribute__((visibility("default"))) int bertserve_check_text(
    const char* raw, size_t size, char* reason, size_t reason_cap, char* message, size_t message_cap) {
  auto error = CheckText(std::string_view(raw, size));
  if (!error) return 0;
  CopyOut(FailureName(error->reason), reason, reason_cap);
  CopyOut(error->message, message, message_cap);
  return 1;
}

// A tokenizer from tokenizer.json's bytes, or null with the reason in `message`.
__attribute__((visibility("default"))) void* bertserve_tokenizer_new(
    const char* json, size_t size, char* message, size_t message_cap) {
  try {
    return tokenizer::Tokenizer::FromJson(std::string_view(json, size)).release();
  } catch (const std::exception& e) {
    CopyOut(e.what(), message, message_cap);
    return nullptr;
  }
}

__attribute__((visibility("default"))) void bertserve_tokenizer_free(void* t) {
  delete static_cast<tokenizer::Tokenizer*>(t);
}

// Encodes `count` texts, each checked first (CheckText). For text i: ids_out[offsets[i]..offsets[i+1]) and
// status[i] = 0 (kept), 1 (truncated) or 2 (rejected: no ids). Returns the ids written, or -1 when `cap` is
// too small.
__attribute__((visibility("default"))) int64_t bertserve_tokenizer_encode(
    void* t, const char* const* texts, const size_t* sizes, size_t count, size_t max_len, int64_t* ids_out,
    size_t cap, int64_t* offsets, int8_t* status) {
  try {
    const auto& tok = *static_cast<tokenizer::Tokenizer*>(t);
    std::vector<int64_t> ids;
    size_t used = 0;
    offsets[0] = 0;
    for (size_t i = 0; i < count; ++i) {
      const std::string_view text(texts[i], sizes[i]);
      if (unicode::FirstInvalid(text) != std::string_view::npos) {
        status[i] = 2;
        ids.clear();
      } else {
        status[i] = tok.Encode(text, max_len, &ids) ? 1 : 0;
      }
      if (used + ids.size() > cap) return -1;
      std::copy(ids.begin(), ids.end(), ids_out + used);
      used += ids.size();
      offsets[i + 1] = static_cast<int64_t>(used);
    }
    return static_cast<int64_t>(used);
  } catch (const std::exception&) {
    return -1;
  }
}

// Encodes `count` pairs (first[i], second[i]), each text checked for UTF-8 first; `strategy` 0: longest_first,
// 1: only_second. For pair i: ids_out and types_out[offsets[i]..offsets[i+1]) and status[i] = 0 (kept),
// 1 (truncated), 2 (a text is not UTF-8) or 3 (only_second: the first fills max_len). Returns the ids written,
// -1 when `cap` is too small, -2 when the tokenizer has no pair template it reproduces.
__attribute__((visibility("default"))) int64_t bertserve_tokenizer_encode_pairs(
    void* t, const char* const* first, const size_t* first_sizes, const char* const* second,
    const size_t* second_sizes, size_t count, size_t max_len, int strategy, int64_t* ids_out, int64_t* types_out,
    size_t cap, int64_t* offsets, int8_t* status) {
  try {
    const auto& tok = *static_cast<tokenizer::Tokenizer*>(t);
    if (!tok.pair_unsupported().empty()) return -2;
    const auto how = strategy == 1 ? tokenizer::PairTruncation::kOnlySecond : tokenizer::PairTruncation::kLongestFirst;
    std::vector<int64_t> ids, types;
    size_t used = 0;
    offsets[0] = 0;
    for (size_t i = 0; i < count; ++i) {
      const std::string_view a(first[i], first_sizes[i]), b(second[i], second_sizes[i]);
      ids.clear();
      types.clear();
      if (unicode::FirstInvalid(a) != std::string_view::npos || unicode::FirstInvalid(b) != std::string_view::npos) {
        status[i] = 2;
      } else {
        switch (tok.EncodePair(a, b, max_len, how, &ids, &types)) {
          case tokenizer::PairOutcome::kKept: status[i] = 0; break;
          case tokenizer::PairOutcome::kTruncated: status[i] = 1; break;
          case tokenizer::PairOutcome::kFirstTooLong: status[i] = 3; break;
        }
      }
      if (used + ids.size() > cap) return -1;
      std::copy(ids.begin(), ids.end(), ids_out + used);
      std::copy(types.begin(), types.end(), types_out + used);
      used += ids.size();
      offsets[i + 1] = static_cast<int64_t>(used);
    }
    return static_cast<int64_t>(used);
  } catch (const std::exception&) {
    return -1;
  }
}

// Why the tokenizer cannot encode pairs (written to `message`), 0 when it can.
__attribute__((visibility("default"))) int bertserve_tokenizer_pair_unsupported(void* t, char* message,
                                                                                size_t message_cap) {
  const std::string& why = static_cast<tokenizer::Tokenizer*>(t)->pair_unsupported();
  CopyOut(why, message, message_cap);
  return why.empty() ? 0 : 1;
}

// The normalizer alone: `text` (UTF-8) normalized as the tokenizer does, into `out`; returns the bytes written
// or -1 when `cap` is too small.
__attribute__((visibility("default"))) int64_t bertserve_normalize(
    int clean_text, int chinese, int strip_accents, int lowercase, const char* text, size_t size, char* out,
    size_t cap) {
  tokenizer::NormalizerSettings s{clean_text != 0, chinese != 0, std::nullopt, lowercase != 0};
  if (strip_accents >= 0) s.strip_accents = strip_accents != 0;
  std::u32string in, normalized, scratch;
  unicode::Decode(std::string_view(text, size), &in);
  tokenizer::Normalize(s, in, &normalized, &scratch);
  std::string bytes;
  for (char32_t c : normalized) unicode::AppendUtf8(c, &bytes);
  if (bytes.size() > cap) return -1;
  std::memcpy(out, bytes.data(), bytes.size());
  return static_cast<int64_t>(bytes.size());
}

// The pre-tokenizer alone: the words of `text` joined by '\n' into `out`; returns the bytes written or -1.
__attribute__((visibility("default"))) int64_t bertserve_pretokenize(const char* text, size_t size, char* out,
                                                                     size_t cap) {
  std::u32string in;
  unicode::Decode(std::string_view(text, size), &in);
  std::string bytes;
  tokenizer::PreTokenize(in, [&](std::u32string_view word) {
    if (!bytes.empty()) bytes.push_back('\n');
    for (char32_t c : word) unicode::AppendUtf8(c, &bytes);
  });
  if (bytes.size() > cap) return -1;
  std::memcpy(out, bytes.data(), bytes.size());
  return static_cast<int64_t>(bytes.size());
}

// The scheduler's queue (work_queue.h) behind an opaque handle.
__attribute__((visibility("default"))) void* bertserve_queue_new(int lanes, int by_arrival) {
  auto* q = new WorkQueue(by_arrival != 0);
  q->set_lanes(lanes);
  return q;
}
__attribute__((visibility("default"))) void bertserve_queue_free(void* q) { delete static_cast<WorkQueue*>(q); }

// The standing-queue rule (work_queue.h); 1 while the queue stands.
__attribute__((visibility("default"))) void bertserve_queue_set_standing(void* q, uint64_t target_ns, uint64_t interval_ns) {
  static_cast<WorkQueue*>(q)->set_standing(target_ns, interval_ns);
}
__attribute__((visibility("default"))) int bertserve_queue_standing(void* q) {
  return static_cast<WorkQueue*>(q)->standing() ? 1 : 0;
}
__attribute__((visibility("default"))) double bertserve_queue_wait_ratio(void* q) {
  return static_cast<WorkQueue*>(q)->wait_ratio();
}

// 1: admitted; 0: refused. The job arrives at `now_ns`. `ahead_s`: the predicted wait before its batch starts;
// `standing_wait_s`: refused because the queue stands, its predicted wait (else 0).
__attribute__((visibility("default"))) int bertserve_queue_offer(
    void* q, uint64_t id, uint64_t deadline_ns, int hard, int64_t rows, int64_t tokens, double work_s, double own_s,
    uint64_t now_ns, double* ahead_s, double* standing_wait_s) {
  const Admission a =
      static_cast<WorkQueue*>(q)->Offer({id, deadline_ns, hard != 0, rows, tokens, work_s, own_s, now_ns}, now_ns);
  *ahead_s = a.ahead_s;
  *standing_wait_s = a.standing_wait_s;
  return a.admitted ? 1 : 0;
}

// The ids of the batch taken (returns their count) and of the expired (`*expired_count`); `*work_s`: the batch's.
__attribute__((visibility("default"))) size_t bertserve_queue_take(
    void* q, uint64_t now_ns, int64_t max_rows, int64_t max_tokens, uint64_t* batch, uint64_t* expired,
    size_t* expired_count, size_t cap, double* work_s) {
  const WorkQueue::Taken t = static_cast<WorkQueue*>(q)->Take(now_ns, max_rows, max_tokens);
  for (size_t i = 0; i < t.batch.size() && i < cap; ++i) batch[i] = t.batch[i].id;
  for (size_t i = 0; i < t.expired.size() && i < cap; ++i) expired[i] = t.expired[i].id;
  *expired_count = t.expired.size();
  *work_s = t.work_s;
  return t.batch.size();
}

__attribute__((visibility("default"))) void bertserve_queue_done(void* q, double work_s) {
  static_cast<WorkQueue*>(q)->Done(work_s);
}
__attribute__((visibility("default"))) double bertserve_queue_backlog(void* q) {
  return static_cast<WorkQueue*>(q)->backlog_s();
}

// A CPU cost model fitted from two shapes (cost_model.h), then `observations` completed batches that each took
// `observed_factor` times their prediction; returns its forward time for [batch, seq].
__attribute__((visibility("default"))) double bertserve_cost_fit_forward(
    double s1, double s2, int64_t max_batch, int64_t max_seq, int observations, double observed_factor,
    int64_t batch, int64_t seq) {
  CostModel m = CostModel::Fit(1, 16, s1, 8, 64, s2, max_batch, LengthBuckets(max_seq));
  for (int i = 0; i < observations; ++i) m.Observe(m.Measured(batch, seq), observed_factor * m.Measured(batch, seq));
  return m.Forward(batch, seq);
}

// What one request asks of the device (cost_model.h's RequestCost) under the CPU cost model fitted as above:
// `alone` 1, a sequence task's request served alone in forwards of [rows[i], seqs[i]]; 0, embed's rows of lengths
// seqs[i] (rows unused) that join batches with others'. Writes work_s, own_s and tokens.
__attribute__((visibility("default"))) void bertserve_cost_request(
    double s1, double s2, int64_t max_batch, int64_t max_seq, int alone, const int64_t* rows, const int64_t* seqs,
    size_t count, double* work_s, double* own_s, int64_t* tokens) {
  const CostModel m = CostModel::Fit(1, 16, s1, 8, 64, s2, max_batch, LengthBuckets(max_seq));
  RequestCost c;
  if (alone != 0) {
    std::vector<std::pair<int64_t, int64_t>> forwards;
    for (size_t i = 0; i < count; ++i) forwards.emplace_back(rows[i], seqs[i]);
    c = AloneCost(m, forwards, LengthBuckets(max_seq));
  } else {
    c = BatchedCost(m, std::vector<int64_t>(seqs, seqs + count), LengthBuckets(max_seq));
  }
  *work_s = c.work_s, *own_s = c.own_s, *tokens = c.tokens;
}

}  // extern "C"
