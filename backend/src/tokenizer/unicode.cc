#include "tokenizer/unicode.h"

namespace bertserve::unicode {
namespace {
#include "tokenizer/unicode_tables.inc"
}  // namespace

const CharRecord& Lookup(char32_t cp) {
  const uint32_t block = kStage1[cp >> kBlockShift];
  return kRecords[kStage2[(block << kBlockShift) | (cp & ((1u << kBlockShift) - 1))]];
}

std::span<const uint32_t> Mapping(uint32_t offset, const char32_t& cp) {
  if (offset == 0) return {reinterpret_cast<const uint32_t*>(&cp), 1};
  return {kPool + offset + 1, kPool[offset]};
}

const char* Version() { return kUnicodeVersion; }

size_t FirstInvalid(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte (Unicode table 3-7)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + 1 >= n || b[i + 1] < lo || b[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (i + k >= n || (b[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

void Decode(std::string_view s, std::u32string* out) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  out->reserve(out->size() + n);
  for (size_t i = 0; i < n;) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      out->push_back(c);
      i += 1;
    } else if (c < 0xE0 && i + 1 < n) {
      out->push_back((char32_t(c & 0x1F) << 6) | (b[i + 1] & 0x3F));
      i += 2;
    } else if (c < 0xF0 && i + 2 < n) {
      out->push_back((char32_t(c & 0x0F) << 12) | (char32_t(b[i + 1] & 0x3F) << 6) | (b[i + 2] & 0x3F));
      i += 3;
    } else if (i + 3 < n) {
      out->push_back((char32_t(c & 0x07) << 18) | (char32_t(b[i + 1] & 0x3F) << 12) |
                     (char32_t(b[i + 2] & 0x3F) << 6) | (b[i + 3] & 0x3F));
      i += 4;
    } else {
      break;  // ill-formed tail: the caller validated, so never reached
    }
  }
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsPythonSpace(char32_t cp) {
  // CPython's _PyUnicode_IsWhitespace: bidirectional class WS, B or S, or category Zs (Unicode 14.0).
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace bertserve::unicode
