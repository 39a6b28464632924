// The rerank task's pure part: a query and its documents -> padded [n, seq] ids, mask and type ids of the pairs
// `[CLS] query [SEP] document [SEP]`, in forwards of at most `max_rows` rows. No Triton or torch types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batching.h"
#include "tokenizer/tokenizer.h"

namespace bertserve {

// One forward's rows: documents [first, first + rows) of the request, padded to the longest of them.
struct PairChunk {
  size_t first = 0;
  int64_t rows = 0, seq = 0;
  std::vector<int64_t> ids, mask, types;  // [rows, seq]
};

struct PairOptions {
  int64_t max_seq = 0;
  int64_t max_rows = 0;
  tokenizer::PairTruncation truncation = tokenizer::PairTruncation::kLongestFirst;
  bool truncate = true;  // false: a pair past max_seq is refused (too_long) rather than cut
};

// The chunks of (query, documents[i]) pairs, or the error that names the first pair it cannot keep: with
// only_second, a query that fills max_seq on its own; with truncate=false, a pair past max_seq.
std::optional<RequestError> EncodePairs(const tokenizer::Tokenizer& tokenizer, const std::string& query,
                                        const std::vector<std::string>& documents, const PairOptions& options,
                                        std::vector<PairChunk>* chunks);

}  // namespace bertserve
