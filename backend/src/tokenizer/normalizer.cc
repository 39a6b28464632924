#include "tokenizer/normalizer.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace bertserve::tokenizer {
namespace {

using unicode::Lookup;

bool IsChinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// NFD: each code point's full decomposition, then every run of non-zero combining classes stably sorted.
void Nfd(std::u32string_view in, std::u32string* out) {
  out->clear();
  for (char32_t c : in) {
    for (uint32_t d : unicode::Mapping(Lookup(c).nfd, c)) out->push_back(d);
  }
  auto ccc = [](char32_t c) { return Lookup(c).ccc; };
  for (size_t i = 0; i < out->size();) {
    if (ccc((*out)[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out->size() && ccc((*out)[j]) != 0) ++j;
    std::stable_sort(out->begin() + static_cast<std::ptrdiff_t>(i), out->begin() + static_cast<std::ptrdiff_t>(j),
                     [&](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
}

}  // namespace

void Normalize(const NormalizerSettings& s, std::u32string_view in, std::u32string* out, std::u32string* scratch) {
  std::u32string& a = *scratch;
  a.clear();
  a.reserve(in.size());
  for (char32_t c : in) {
    if (s.clean_text) {
      const bool tab = c == U'\t' || c == U'\n' || c == U'\r';
      const uint8_t flags = Lookup(c).flags;
      if (c == 0 || c == 0xFFFD || (!tab && (flags & unicode::kControl))) continue;
      if (tab || (flags & unicode::kWhitespace)) c = U' ';
    }
    if (s.handle_chinese_chars && IsChinese(c)) {
      a.push_back(U' ');
      a.push_back(c);
      a.push_back(U' ');
    } else {
      a.push_back(c);
    }
  }
  if (s.strip_accents.value_or(s.lowercase)) {
    Nfd(a, out);
    std::erase_if(*out, [](char32_t c) { return (Lookup(c).flags & unicode::kNonspacing) != 0; });
    a.swap(*out);
  }
  out->clear();
  if (!s.lowercase) {
    out->swap(a);
    return;
  }
  out->reserve(a.size());
  for (char32_t c : a) {
    for (uint32_t l : unicode::Mapping(Lookup(c).lower, c)) out->push_back(l);
  }
}

}  // namespace bertserve::tokenizer
