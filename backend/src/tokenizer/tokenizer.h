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
#include "tokenizer/wordpiece.h"

namespace bertserve::tokenizer {

struct AddedToken {
  std::string content;
  int64_t id;
};

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

 private:
  Tokenizer(WordPiece model, NormalizerSettings normalizer, std::vector<AddedToken> added,
            std::vector<int64_t> prefix, std::vector<int64_t> suffix);
  // Normalizes, pre-tokenizes and tokenizes one stretch of text without added tokens, a chunk at a time,
  // until `ids` holds `limit` ids or more.
  void EncodeSegment(std::string_view text, size_t limit, std::vector<int64_t>* ids) const;
  // Normalizes, pre-tokenizes and tokenizes one chunk, word by word until `ids` holds `limit` ids or more.
  void EncodeChunk(std::string_view text, size_t limit, std::vector<int64_t>* ids) const;

  WordPiece model_;
  NormalizerSettings normalizer_;
  std::vector<AddedToken> added_;  // matched in the raw text, leftmost then longest
  std::vector<int64_t> prefix_, suffix_;
};

}  // namespace bertserve::tokenizer
