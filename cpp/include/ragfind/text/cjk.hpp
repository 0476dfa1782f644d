// CJK script classification for the "cjk" analysis (Lucene's CJKAnalyzer: Han, Hiragana,
// Katakana and Hangul runs become overlapping character bigrams, a lone character a unigram).
#pragma once

#include <cstdint>

namespace ragfind::text {

/// True for the code points CJKBigramFilter bigrams: Han (unified ideographs, extensions,
/// compatibility ideographs, the iteration mark), Hiragana, Katakana (with the prolonged sound
/// mark and the half-width forms) and Hangul (syllables and jamo).
inline bool is_cjk(std::uint32_t cp) {
  if (cp < 0x1100) return false;
  if (cp <= 0x11FF) return true;  // Hangul Jamo
  if (cp < 0x3005) return false;
  if (cp <= 0x3007) return cp != 0x3006;            // 々 (iteration mark), 〇
  if (cp >= 0x3040 && cp <= 0x30FF) return true;    // Hiragana, Katakana
  if (cp >= 0x3130 && cp <= 0x318F) return true;    // Hangul Compatibility Jamo
  if (cp >= 0x31F0 && cp <= 0x31FF) return true;    // Katakana Phonetic Extensions
  if (cp >= 0x3400 && cp <= 0x4DBF) return true;    // Han Extension A
  if (cp >= 0x4E00 && cp <= 0x9FFF) return true;    // Han
  if (cp >= 0xA960 && cp <= 0xA97F) return true;    // Hangul Jamo Extended-A
  if (cp >= 0xAC00 && cp <= 0xD7FF) return true;    // Hangul Syllables, Jamo Extended-B
  if (cp >= 0xF900 && cp <= 0xFAFF) return true;    // CJK Compatibility Ideographs
  if (cp >= 0xFF66 && cp <= 0xFF9F) return true;    // Half-width Katakana
  if (cp >= 0xFFA0 && cp <= 0xFFDC) return true;    // Half-width Hangul
  if (cp >= 0x20000 && cp <= 0x3134F) return true;  // Han Extensions B-G, compatibility supplement
  return false;
}

}  // namespace ragfind::text
