// A checkpoint's tokenizer.json (Hugging Face `tokenizers`) reproduced natively: special tokens split out of
// the raw text, BertNormalizer, BertPreTokenizer, WordPiece, then the post-processor's special tokens and
// truncation. Only that pipeline is supported; anything else is refused at load with the reason (export
// checks the same rules first and keeps the Python tokenizer for such a checkpoint).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/normalizer.h"
#include "tokenizer/truncation.h"
#include "tokenizer/wordpiece.h"

namespace bertserve::tokenizer {

struct AddedToken {
  std::string content;
  int64_t id;
};

// The post-processor's pair template: special tokens around and between the two sequences, each piece with its
// type id (BERT: [CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1).
struct PairTemplate {
  std::vector<int64_t> ids[3], types[3];  // before A, between A and B, after B
  int64_t type_a = 0, type_b = 1;
  size_t special_count() const { return ids[0].size() + ids[1].size() + ids[2].size(); }
};

enum class PairOutcome { kKept, kTruncated, kFirstTooLong };

class Tokenizer {
 public:
  // Parses tokenizer.json; throws std::invalid_argument naming what it cannot reproduce.
  static std::unique_ptr<Tokenizer> FromJson(std::string_view json);

  // The ids of `text` (well-formed UTF-8) with the post-processor's special tokens, the content cut to
  // max_len - the special tokens' count. Returns whether anything was cut. Tokenizing stops once the content
  // passes that budget: the cost is bounded by max_len, not by the text's size (bar a linear scan).
  bool Encode(std::string_view text, size_t max_len, std::vector<int64_t>* ids) const;

  size_t special_count() const { return prefix_.size() + suffix_.size(); }
  // The least and the greatest id Encode can give (vocabulary, added and special tokens).
  std::pair<int64_t, int64_t> id_range() const;

  // The ids and type ids of the pair (first, second) under the pair template, the contents cut as `strategy`
  // says to max_len less the template's special tokens. kFirstTooLong (kOnlySecond only): nothing written,
  // the first text alone fills the budget. Each content is tokenized to one id past the budget, both in full
  // only when both pass it, the budget is odd and kLongestFirst must know which is longer.
  // Throws std::logic_error when pairs are unsupported (pair_unsupported() says why).
  PairOutcome EncodePair(std::string_view first, std::string_view second, size_t max_len, PairTruncation strategy,
                         std::vector<int64_t>* ids, std::vector<int64_t>* type_ids) const;

  // Why this tokenizer.json cannot encode pairs natively (its pair template), or empty when it can.
  const std::string& pair_unsupported() const { return pair_unsupported_; }
  size_t pair_special_count() const { return pair_.special_count(); }

 private:
  Tokenizer(WordPiece model, NormalizerSettings normalizer, std::vector<AddedToken> added,
            std::vector<int64_t> prefix, std::vector<int64_t> suffix, PairTemplate pair, std::string pair_unsupported);
  // The content ids of `text` (added tokens, then segments between them) appended to `ids` until it holds
  // `limit` ids or more.
  void EncodeContent(std::string_view text, size_t limit, std::vector<int64_t>* ids) const;
  // Normalizes, pre-tokenizes and tokenizes one stretch of text without added tokens, a chunk at a time,
  // until `ids` holds `limit` ids or more.
  void EncodeSegment(std::string_view text, size_t limit, std::vector<int64_t>* ids) const;
  // Normalizes, pre-tokenizes and tokenizes one chunk, word by word until `ids` holds `limit` ids or more.
  void EncodeChunk(std::string_view text, size_t limit, std::vector<int64_t>* ids) const;

  WordPiece model_;
  NormalizerSettings normalizer_;
  std::vector<AddedToken> added_;  // matched in the raw text, leftmost then longest
  std::vector<int64_t> prefix_, suffix_;
  PairTemplate pair_;
  std::string pair_unsupported_;
};

}  // namespace bertserve::tokenizer
