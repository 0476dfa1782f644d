// BM25 variants, split into a query-side weight (idf) and a document-side weight (the term
// frequency component), as PISA's scorer/bm25.hpp does.
//
// Formulas follow Kamphuis, de Vries, Boytsov and Lin, "Which BM25 Do You Mean? A Large-Scale
// Reproducibility Study of Scoring Variants", ECIR 2020, and are written exactly as bm25s
// (bm25s/scoring.py) computes them, so that scores agree with bm25s for the same tokens.
// N = live documents, df = documents containing the term, L = 1 - b + b * dl / avgdl.
//
//   robertson  idf = log((N - df + .5) / (df + .5)), clamped at 0   tfc = tf / (k1 L + tf)
//   lucene     idf = log(1 + (N - df + .5) / (df + .5))             tfc = tf / (k1 L + tf)
//   atire      idf = log(N / df)                                    tfc = (k1 + 1) tf / (tf + k1 L)
//   bm25l      idf = log((N + 1) / (df + .5))                       c = tf / L,
//              tfc = (k1 + 1)(c + delta) / (k1 + c + delta)         (Lv and Zhai, CIKM 2011)
//   bm25+      idf = log((N + 1) / df)                              tfc = (k1 + 1) tf / (k1 L + tf) + delta
//                                                                   (Lv and Zhai, CIKM 2011)
// score(q, d) = sum over query tokens t (repeats count) of idf(t) * tfc(tf(t, d), d).
// bm25l and bm25+ give a document that lacks t the non-zero tfc(0); like bm25s we score
// matching documents as C + sum idf (tfc(tf) - tfc(0)) with C = sum idf tfc(0) shared by all.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ragfind::bm25 {

enum class Method : std::uint32_t { Lucene = 0, Robertson = 1, Atire = 2, BM25L = 3, BM25Plus = 4 };

inline Method parse_method(const std::string& name) {
  if (name == "lucene") return Method::Lucene;
  if (name == "robertson") return Method::Robertson;
  if (name == "atire") return Method::Atire;
  if (name == "bm25l") return Method::BM25L;
  if (name == "bm25+" || name == "bm25plus") return Method::BM25Plus;
  throw std::invalid_argument("method: unknown BM25 variant '" + name +
                              "'; expected one of 'lucene', 'robertson', 'atire', 'bm25l', 'bm25+'");
}

inline const char* method_name(Method m) {
  switch (m) {
    case Method::Lucene: return "lucene";
    case Method::Robertson: return "robertson";
    case Method::Atire: return "atire";
    case Method::BM25L: return "bm25l";
    case Method::BM25Plus: return "bm25+";
  }
  return "?";
}

struct Params {
  Method method = Method::Lucene;
  double k1 = 1.2;
  double b = 0.75;
  double delta = 0.0;  // bm25l / bm25+ only
};

/// Query side: the idf of a term with document frequency df among n live documents.
inline double idf(const Params& p, double df, double n) {
  switch (p.method) {
    case Method::Robertson: {
      double inner = (n - df + 0.5) / (df + 0.5);
      return std::log(inner < 1.0 ? 1.0 : inner);
    }
    case Method::Lucene: return std::log(1.0 + (n - df + 0.5) / (df + 0.5));
    case Method::Atire: return std::log(n / df);
    case Method::BM25L: return std::log((n + 1.0) / (df + 0.5));
    case Method::BM25Plus: return std::log((n + 1.0) / df);
  }
  return 0.0;
}

/// Document side: the length normalisation L = 1 - b + b * dl / avgdl.
inline double length_norm(const Params& p, double dl, double avgdl) {
  return avgdl > 0 ? (1.0 - p.b + p.b * dl / avgdl) : 1.0;
}

/// Document side: the term-frequency component for tf occurrences and normalisation L.
template <typename T>
inline T tf_component(Method m, T k1, T delta, T tf, T L) {
  switch (m) {
    case Method::Lucene:
    case Method::Robertson: return tf / (k1 * L + tf);
    case Method::Atire: return tf * (k1 + 1) / (tf + k1 * L);
    case Method::BM25L: {
      T c = tf / L;
      return (k1 + 1) * (c + delta) / (k1 + c + delta);
    }
    case Method::BM25Plus: return (k1 + 1) * tf / (k1 * L + tf) + delta;
  }
  return 0;
}

/// tfc(0): what a document lacking the term gets (non-zero only for bm25l and bm25+).
inline double tf_component_absent(const Params& p) {
  if (p.method == Method::BM25L) return (p.k1 + 1) * p.delta / (p.k1 + p.delta);
  if (p.method == Method::BM25Plus) return p.delta;
  return 0.0;
}

}  // namespace ragfind::bm25
