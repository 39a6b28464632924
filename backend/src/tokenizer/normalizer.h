// BERT normalization as the Hugging Face fast tokenizer's BertNormalizer applies it (tokenizers/src/normalizers/
// bert.rs): clean the text, pad CJK ideographs with spaces, strip accents (NFD, then drop nonspacing marks),
// lowercase (full mapping, one code point at a time).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace bertserve::tokenizer {

struct NormalizerSettings {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  // unset: follow lowercase
  bool lowercase = true;
};

// Normalizes `in` into `out` (cleared first); `scratch` is working memory the caller may reuse.
void Normalize(const NormalizerSettings& s, std::u32string_view in, std::u32string* out, std::u32string* scratch);

}  // namespace bertserve::tokenizer
