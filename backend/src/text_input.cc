#include "text_input.h"

#include <string>

#include "tokenizer/unicode.h"

namespace bertserve {

std::optional<RequestError> CheckText(std::string_view raw) {
  if (raw.size() > kMaxTextBytes) {
    return RequestError{FailureReason::kTextTooLarge, "TEXT element is " + std::to_string(raw.size()) + " bytes; the limit is " +
                                              std::to_string(kMaxTextBytes)};
  }
  if (const size_t bad = unicode::FirstInvalid(raw); bad != std::string_view::npos) {
    // Python prints the byte as bytes' repr: b'\xNN' (a bad byte is never ASCII).
    const auto byte = static_cast<unsigned char>(raw[bad]);
    const char hex[] = "0123456789abcdef";
    return RequestError{FailureReason::kInvalidUtf8, "TEXT is not valid UTF-8 (byte " + std::to_string(bad) + ": b'\\x" +
                                            hex[byte >> 4] + hex[byte & 15] + "')"};
  }
  std::u32string text;
  unicode::Decode(raw, &text);
  for (char32_t c : text) {
    if (!unicode::IsPythonSpace(c)) return std::nullopt;
  }
  return RequestError{FailureReason::kEmptyText, "TEXT is empty"};
}

}  // namespace bertserve
