// The sequence-classifier tasks' pure part: a request's texts -> padded [n, seq] ids, mask and type ids, in
// forwards of at most `max_rows` rows. A row is one text (`[CLS] A [SEP]`, type ids 0: classify) or a pair
// (`[CLS] A [SEP] B [SEP]`, type ids 0 then 1: rerank's query with each document, classify's TEXT with TEXT_PAIR).
// No Triton or torch types.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "batching.h"
#include "tokenizer/tokenizer.h"

namespace bertserve {

// One forward's rows: rows [first, first + rows) of the request, padded to the longest of them.
struct RowChunk {
  size_t first = 0;
  int64_t rows = 0, seq = 0;
  std::vector<int64_t> ids, mask, types;  // [rows, seq]
};

struct RowOptions {
  int64_t max_seq = 0;
  int64_t max_rows = 0;
  tokenizer::PairTruncation truncation = tokenizer::PairTruncation::kLongestFirst;
  bool truncate = true;  // false: a row past max_seq is refused (too_long) rather than cut
};

// A request's texts. Row i is firsts[i] (or firsts[0] for every row when there is one first and several
// seconds: a query and its documents), alone when `seconds` is empty, else paired with seconds[i].
struct RowTexts {
  std::span<const std::string> firsts;
  std::span<const std::string> seconds;
  const char* first_name = "";   // the inputs, as errors name them: QUERY and DOCUMENTS, TEXT and TEXT_PAIR
  const char* second_name = "";

  size_t rows() const { return seconds.empty() ? firsts.size() : seconds.size(); }
};

// The chunks of the request's rows, or the error that names the first row it cannot keep: with only_second, a
// first text that fills max_seq on its own; with truncate=false, a row past max_seq.
std::optional<RequestError> EncodeRows(const tokenizer::Tokenizer& tokenizer, const RowTexts& texts,
                                       const RowOptions& options, std::vector<RowChunk>* chunks);

}  // namespace bertserve
