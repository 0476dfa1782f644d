// Phrase queries (see phrase.hpp).
#include "ragfind/bm25/phrase.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace ragfind::bm25 {

namespace {

// Calls f(slot, tf) for every posting of `term` (dead documents included), segment by segment:
// the only code here that reads postings.
template <class F>
void for_each_term_posting(const InvertedIndex& index, std::uint32_t term, F&& f) {
  for (const auto& seg : index.segments()) {
    const std::int64_t slot = seg->slot_of(term);
    if (slot < 0) continue;
    const std::uint32_t base = seg->base;
    for_each_posting(*seg, static_cast<std::size_t>(slot),
                     [&](std::uint32_t local, std::uint32_t tf) { f(base + local, tf); });
  }
}

bool has_repeats(const std::vector<std::uint32_t>& terms) {
  for (std::size_t i = 0; i < terms.size(); ++i)
    for (std::size_t j = i + 1; j < terms.size(); ++j)
      if (terms[i] == terms[j]) return true;
  return false;
}

double frequency(const std::vector<const std::vector<std::int64_t>*>& lists, const std::vector<std::uint32_t>& terms,
                 std::int64_t slop, bool repeated, std::vector<std::int64_t>& cands) {
  const std::size_t n = lists.size();
  for (const auto* l : lists)
    if (l->empty()) return 0.0;
  double freq = 0.0;
  if (slop == 0 && !repeated) {
    // Exact: anchors a with a + i in list i, merged (positions ascend in every list).
    constexpr std::size_t kMax = 16;
    std::size_t at_small[kMax];
    std::vector<std::size_t> at_big;
    std::size_t* at = at_small;
    if (n > kMax) {
      at_big.assign(n, 0);
      at = at_big.data();
    } else {
      std::fill(at, at + n, std::size_t(0));
    }
    for (std::int64_t a : *lists[0]) {
      bool ok = true;
      for (std::size_t i = 1; i < n && ok; ++i) {
        const auto& l = *lists[i];
        const std::int64_t want = a + static_cast<std::int64_t>(i);
        std::size_t j = at[i];
        while (j < l.size() && l[j] < want) ++j;
        at[i] = j;
        if (j == l.size()) return freq;  // no later anchor can match either
        ok = l[j] == want;
      }
      if (ok) freq += 1.0;
    }
    return freq;
  }
  if (n == 2 && !repeated) {
    // Two words: an anchor's cost is its distance to the nearest (position - 1) of word 1.
    const auto& l = *lists[1];
    std::size_t j = 0;
    for (std::int64_t a : *lists[0]) {
      while (j < l.size() && l[j] - 1 < a) ++j;
      std::int64_t best = std::numeric_limits<std::int64_t>::max();
      if (j < l.size()) best = l[j] - 1 - a;
      if (j > 0) best = std::min(best, a - (l[j - 1] - 1));
      if (best <= slop) freq += 1.0 / (1.0 + static_cast<double>(best));
    }
    return freq;
  }
  std::vector<std::int64_t> used;  // positions taken by earlier words of the same term
  for (std::int64_t a : *lists[0]) {
    // The window [lo, lo + slop] must hold a: lo is a or a shifted position in [a - slop, a).
    cands.clear();
    cands.push_back(a);
    for (std::size_t i = 1; i < n; ++i) {
      const auto& l = *lists[i];
      const std::int64_t si = static_cast<std::int64_t>(i);
      auto it = std::lower_bound(l.begin(), l.end(), a - slop + si);
      for (; it != l.end() && *it - si < a; ++it) cands.push_back(*it - si);
    }
    std::sort(cands.begin(), cands.end());
    cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    // The cost is at least a - lo: try lo from a downwards and stop once that bound is beaten.
    for (auto r = cands.rbegin(); r != cands.rend(); ++r) {
      const std::int64_t lo = *r;
      if (a - lo >= best) break;
      std::int64_t hi = a;
      bool ok = true;
      for (std::size_t i = 1; i < n && ok; ++i) {
        const auto& l = *lists[i];
        const std::int64_t si = static_cast<std::int64_t>(i);
        auto it = std::lower_bound(l.begin(), l.end(), lo + si);
        if (repeated) {
          // Distinct positions for repeated words: skip those earlier words of the term took.
          auto taken = [&](std::int64_t p) {
            if (terms[0] == terms[i] && p == a) return true;
            for (std::size_t j = 1; j < i; ++j)
              if (terms[j] == terms[i] && used[j] == p) return true;
            return false;
          };
          while (it != l.end() && taken(*it)) ++it;
        }
        if (it == l.end() || *it - si > lo + slop) {
          ok = false;
          break;
        }
        if (repeated) {
          used.resize(n);
          used[i] = *it;
        }
        hi = std::max(hi, *it - si);
      }
      if (ok && hi - lo <= slop) best = std::min(best, hi - lo);
    }
    if (best <= slop) freq += 1.0 / (1.0 + static_cast<double>(best));
  }
  return freq;
}

}  // namespace

void term_slots(const InvertedIndex& index, std::uint32_t term, std::vector<std::uint32_t>& out) {
  out.clear();
  for_each_term_posting(index, term, [&](std::uint32_t d, std::uint32_t) {
    if (index.is_live(d)) out.push_back(d);
  });
}

void term_postings(const InvertedIndex& index, std::uint32_t term, std::vector<std::uint32_t>& slots,
                   std::vector<std::uint32_t>& tfs) {
  slots.clear();
  tfs.clear();
  for_each_term_posting(index, term, [&](std::uint32_t d, std::uint32_t tf) {
    if (!index.is_live(d)) return;
    slots.push_back(d);
    tfs.push_back(tf);
  });
}

double phrase_frequency(const std::vector<const std::vector<std::int64_t>*>& lists,
                        const std::vector<std::uint32_t>& terms, std::int64_t slop, std::vector<std::int64_t>& cands) {
  return frequency(lists, terms, slop, has_repeats(terms), cands);
}

namespace {

struct PreparedPhrase {
  std::vector<std::uint32_t> distinct;  // its distinct terms
  std::vector<std::size_t> list_of;     // per word: index into distinct
  std::vector<std::uint32_t> terms;
  std::int64_t slop;
  double idf;
  bool possible;
  bool repeated;
};

std::vector<PreparedPhrase> prepare_phrases(const InvertedIndex& index, const std::vector<PhraseQuery>& phrases) {
  std::vector<PreparedPhrase> out;
  const double n = index.num_docs();
  for (const auto& ph : phrases) {
    PreparedPhrase p;
    p.terms = ph.terms;
    p.slop = ph.slop < 0 ? 0 : ph.slop;
    p.idf = 0.0;
    p.possible = !ph.terms.empty();
    for (std::uint32_t t : ph.terms) {
      const double df = static_cast<double>(index.df(t));
      if (df <= 0) p.possible = false;
      if (p.possible) p.idf += idf(index.params(), df, n);
      auto it = std::find(p.distinct.begin(), p.distinct.end(), t);
      p.list_of.push_back(static_cast<std::size_t>(it - p.distinct.begin()));
      if (it == p.distinct.end()) p.distinct.push_back(t);
    }
    p.repeated = p.distinct.size() < p.terms.size();
    out.push_back(std::move(p));
  }
  return out;
}

// The index into l (from `at` on) of the first slot >= d: gallops, then binary searches.
inline std::size_t seek(const std::vector<std::uint32_t>& l, std::size_t at, std::uint32_t d) {
  if (at >= l.size() || l[at] >= d) return at;
  std::size_t lo = at, step = 1;
  while (lo + step < l.size() && l[lo + step] < d) {
    lo += step;
    step *= 2;
  }
  auto it = std::lower_bound(l.begin() + static_cast<std::ptrdiff_t>(lo),
                             l.begin() + static_cast<std::ptrdiff_t>(std::min(l.size(), lo + step + 1)), d);
  return static_cast<std::size_t>(it - l.begin());
}

// Calls emit(slot, entry indexes) for each live, allowed slot holding every distinct term of p
// (entry index j: into term j's list), in slot order, walking the shortest list and galloping
// in the others.
template <class Emit>
void intersect_each(const InvertedIndex& index, const PositionStore& ps, const PreparedPhrase& p,
                    const AllowedSet* allowed, Emit&& emit) {
  const std::size_t nd = p.distinct.size();
  std::vector<const TermPositions*> tp(nd);
  for (std::size_t j = 0; j < nd; ++j) tp[j] = ps.term(p.distinct[j]);
  for (const auto* t : tp)
    if (!t || t->slots.empty()) return;
  std::size_t first = 0;
  for (std::size_t j = 1; j < nd; ++j)
    if (tp[j]->size() < tp[first]->size()) first = j;
  std::vector<std::size_t> at(nd, 0);
  const auto& base = tp[first]->slots;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const std::uint32_t d = base[i];
    if (!index.is_live(d) || (allowed && !allowed->mask[d])) continue;
    at[first] = i;
    bool ok = true;
    for (std::size_t j = 0; j < nd && ok; ++j) {
      if (j == first) continue;
      const auto& l = tp[j]->slots;
      at[j] = seek(l, at[j], d);
      if (at[j] == l.size()) return;  // no later slot can match either
      ok = l[at[j]] == d;
    }
    if (ok) emit(d, at.data());
  }
}

// Reads positions and scores phrases.
struct PhraseScorer {
  const InvertedIndex& index;
  const PositionStore& positions;
  double k1, delta, absent;
  Method method;
  std::vector<std::vector<std::int64_t>> pos;
  std::vector<const std::vector<std::int64_t>*> lists;
  std::vector<std::int64_t> scratch;

  PhraseScorer(const InvertedIndex& ix, const PositionStore& ps)
      : index(ix),
        positions(ps),
        k1(ix.params().k1),
        delta(ix.params().delta),
        absent(tf_component_absent(ix.params())),
        method(ix.params().method) {}

  // Phrase frequency from each distinct term's entry (entry[j]: index into term j's list).
  double freq_at(const PreparedPhrase& p, const std::size_t* entry) {
    if (p.terms.size() == 2 && !p.repeated) return freq_two(p, entry);
    pos.resize(p.distinct.size());
    for (std::size_t j = 0; j < p.distinct.size(); ++j) positions.term(p.distinct[j])->positions(entry[j], pos[j]);
    return from_pos(p);
  }
  // freq_at() of two distinct words, reading their positions as it merges them: the same
  // merges as frequency()'s (the same sums in the same order).
  double freq_two(const PreparedPhrase& p, const std::size_t* entry) const {
    std::uint32_t n0 = 0, n1 = 0;
    const std::uint8_t* b0 = positions.term(p.distinct[0])->entry(entry[0], n0);
    const std::uint8_t* b1 = positions.term(p.distinct[1])->entry(entry[1], n1);
    TermPositions::Reader r0(b0, n0), r1(b1, n1);
    std::int64_t a = 0, cur = 0, prev = 0;
    bool have = r1.next(cur), had = false;
    if (!have) return 0.0;
    double freq = 0.0;
    if (p.slop == 0) {
      while (r0.next(a)) {
        while (have && cur < a + 1) have = r1.next(cur);
        if (!have) break;
        if (cur == a + 1) freq += 1.0;
      }
      return freq;
    }
    while (r0.next(a)) {
      while (have && cur - 1 < a) {
        prev = cur;
        had = true;
        have = r1.next(cur);
      }
      std::int64_t best = std::numeric_limits<std::int64_t>::max();
      if (have) best = cur - 1 - a;
      if (had) best = std::min(best, a - (prev - 1));
      if (best <= p.slop) freq += 1.0 / (1.0 + static_cast<double>(best));
    }
    return freq;
  }
  // Phrase frequency of any slot (decodes the document; for explain).
  double freq(const PreparedPhrase& p, std::uint32_t doc) {
    positions.positions(doc, p.distinct.data(), p.distinct.size(), pos);
    return from_pos(p);
  }
  double from_pos(const PreparedPhrase& p) {
    lists.clear();
    for (std::size_t li : p.list_of) lists.push_back(&pos[li]);
    return frequency(lists, p.terms, p.slop, p.repeated, scratch);
  }
  double part_len(const PreparedPhrase& p, double pf, std::uint32_t len) const {
    const double L = length_norm(index.params(), len, index.avgdl());
    return p.idf * (tf_component<double>(method, k1, delta, pf, L) - absent);
  }
  double part(const PreparedPhrase& p, double pf, std::uint32_t doc) const {
    return part_len(p, pf, index.doc_len(doc));
  }
};

// How many times the phrase frequency may exceed a word's position count. Word 0: once (each
// of its positions anchors at most one match). Word i > 0 with slop s: the anchors whose match
// takes a given position q of word i have distinct positions a and cost >= |q - i - a|, so they
// add at most 1 + 2 * (1/2 + ... + 1/(1 + s)) (1 for an exact phrase).
double slop_factor(std::int64_t s) {
  if (s <= 0) return 1.0;
  double h = 0.0;
  if (s > 4096) {
    h = std::log(static_cast<double>(s) + 1.0);  // >= H(s + 1) - 1
  } else {
    for (std::int64_t d = 1; d <= s; ++d) h += 1.0 / (1.0 + static_cast<double>(d));
  }
  return (1.0 + 2.0 * h) * (1.0 + 1e-12);  // rounded up past the sum's rounding
}

// Upper bounds of one phrase's score from position counts and document lengths, in double,
// padded past rounding so that bound <= threshold proves a document's float score <= threshold
// (the score formula is exact maths up to a few ulps, monotone in pf and the length).
struct ScoreBound {
  const PhraseScorer& scorer;
  const PreparedPhrase& p;
  double pad_abs;

  ScoreBound(const PhraseScorer& s, const PreparedPhrase& ph)
      : scorer(s), p(ph), pad_abs(1e-9 * std::fabs(ph.idf) * (2.0 + s.k1 + std::fabs(s.delta) + s.absent)) {}

  double operator()(double pf, std::uint32_t len) const {
    const double v = scorer.part_len(p, pf, len);
    return v + 1e-9 * std::fabs(v) + pad_abs;
  }
};

// For one list (its position counts bound pf times `factor`) and the current threshold: per
// position count, the largest length code whose bound beats the threshold, kept until the
// threshold changes.
class LengthCuts {
 public:
  static constexpr std::uint32_t kTf = 16;
  LengthCuts(const ScoreBound& bound, double factor) : bound_(bound), factor_(factor) {
    std::fill(theta_, theta_ + kTf, -std::numeric_limits<float>::infinity());
    std::fill(cut_, cut_ + kTf, 255);
  }
  /// Whether a document of length code `len` (rounded down, see length_code) whose entry
  /// has at most `tf` positions may beat theta.
  bool pass(std::uint32_t tf, std::uint8_t len, float theta) {
    if (tf >= kTf) return bound_(static_cast<double>(tf) * factor_, code_length(len)) > theta;
    if (theta_[tf] != theta) {
      theta_[tf] = theta;
      cut_[tf] = longest(static_cast<double>(tf) * factor_, theta, cut_[tf]);
    }
    return len <= cut_[tf];
  }

 private:
  // The largest code <= upto with bound(pf, code_length(code)) > theta (-1 if none): bounds
  // fall as documents grow, and the threshold only rises, so the cut only falls. (A bound at
  // or below theta at some length proves it for every longer document, the bound's padding
  // covering rounding.)
  int longest(double pf, float theta, int upto) const {
    int lo = -1, hi = upto + 1;  // bound(lo) > theta (lo = -1: none), bound(hi) <= theta
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      if (bound_(pf, code_length(static_cast<std::uint8_t>(mid))) > theta) lo = mid;
      else hi = mid;
    }
    return lo;
  }
  const ScoreBound& bound_;
  double factor_;
  float theta_[kTf];
  int cut_[kTf];
};

// Top-k of one phrase alone, with score bounds: documents come in slot order, so one that
// only ties the k-th score loses the tie (TopKQueue breaks ties by slot) and skipping it when
// a bound of its score is <= the threshold is exact. One list drives (the shortest, or for a
// sloppy phrase word 0's when not much longer: its counts bound pf once, the others' only
// with the slop factor), a block at a time: a block whose shortest document and most
// positions cannot beat the threshold is skipped whole, and one whose single-position entries
// cannot is read at its entries with 2+ positions only; then each entry by its length code
// and position count, and by the other lists' once found, before any position is decoded.
void search_one_phrase(const InvertedIndex& index, const PositionStore& positions, const PreparedPhrase& p,
                       const AllowedSet* allowed, PhraseScorer& scorer, TopKQueue& heap) {
  const std::size_t nd = p.distinct.size();
  std::vector<const TermPositions*> tp(nd);
  for (std::size_t j = 0; j < nd; ++j) {
    tp[j] = positions.term(p.distinct[j]);
    if (!tp[j] || tp[j]->slots.empty()) return;
  }
  // Per distinct term: pf <= its position count * factor (the smallest of its words' factors).
  std::vector<double> factor(nd, std::numeric_limits<double>::infinity());
  const double fs = slop_factor(p.slop);
  for (std::size_t w = 0; w < p.terms.size(); ++w)
    factor[p.list_of[w]] = std::min(factor[p.list_of[w]], w == 0 ? 1.0 : fs);
  std::size_t first = 0;
  for (std::size_t j = 1; j < nd; ++j)
    if (tp[j]->size() < tp[first]->size()) first = j;
  const std::size_t w0 = p.list_of[0];
  if (factor[first] > 1.0 && tp[w0]->size() <= 3 * tp[first]->size()) first = w0;
  // The other lists: those with factor 1 first (their counts bound tighter), then shorter first.
  std::vector<std::size_t> order;
  for (std::size_t j = 0; j < nd; ++j)
    if (j != first) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if ((factor[a] == 1.0) != (factor[b] == 1.0)) return factor[a] == 1.0;
    return tp[a]->size() < tp[b]->size();
  });
  const ScoreBound bound(scorer, p);
  std::vector<LengthCuts> cuts;
  cuts.reserve(nd);
  for (std::size_t j = 0; j < nd; ++j) cuts.emplace_back(bound, factor[j]);
  LengthCuts& lead = cuts[first];
  std::vector<std::size_t> at(nd, 0);
  const TermPositions& S = *tp[first];
  // Entry i of the driving list: bounds, then the other lists, then the positions. False once
  // another list is exhausted (nothing later can match).
  auto visit = [&](std::size_t i) {
    const std::uint32_t d = S.slots[i];
    const bool full = heap.full();
    const float theta = heap.threshold();
    const std::uint8_t code = static_cast<std::uint8_t>(S.impact[i] >> 8);
    if (full && !lead.pass(S.tf_bound(i), code, theta)) return true;
    at[first] = i;
    for (std::size_t j : order) {
      const TermPositions& T = *tp[j];
      at[j] = seek(T.slots, at[j], d);
      if (at[j] == T.size()) return false;
      if (T.slots[at[j]] != d) return true;
      if (full && !cuts[j].pass(T.tf_bound(at[j]), code, theta)) return true;
    }
    if (!index.is_live(d) || (allowed && !allowed->mask[d])) return true;
    const std::uint32_t len = index.doc_len(d);
    if (length_code(len) != code) throw std::logic_error("positions out of step with the index (document lengths)");
    const double pf = scorer.freq_at(p, at.data());
    if (pf > 0) heap.insert(static_cast<float>(scorer.part_len(p, pf, len)), d);
    return true;
  };
  const std::size_t nblocks = S.blocks.size();
  for (std::size_t blk = 0; blk < nblocks; ++blk) {
    const TermPositions::Block& b = S.blocks[blk];
    const std::size_t i0 = blk * TermPositions::kBlock;
    bool all = true;
    if (heap.full()) {
      const float theta = heap.threshold();
      all = lead.pass(1, b.min_len, theta);
      if (!all && !(b.max_tf > 1 && lead.pass(b.max_tf, b.min_len_multi, theta))) continue;
    }
    if (all) {
      const std::size_t i1 = std::min(S.size(), i0 + TermPositions::kBlock);
      for (std::size_t i = i0; i < i1; ++i)
        if (!visit(i)) return;
    } else {
      const std::uint8_t *m, *me;
      S.multi_range(blk, m, me);
      for (; m < me; ++m)
        if (!visit(i0 + *m)) return;
    }
  }
}

}  // namespace

void search_phrases(const InvertedIndex& index, const PositionStore& positions, const std::vector<QueryTerm>& plain,
                    const std::vector<PhraseQuery>& phrases, std::size_t k, const AllowedSet* allowed,
                    std::vector<ScoredDoc>& out) {
  out.clear();
  if (positions.num_slots() != index.num_slots()) throw std::logic_error("positions out of step with the index");
  const auto prepared = prepare_phrases(index, phrases);
  const InvertedIndex::Prepared q = index.prepare(plain);
  PhraseScorer scorer(index, positions);
  TopKQueue heap(k);
  auto ok = [&](std::uint32_t d) { return !allowed || allowed->mask[d]; };
  if (q.terms.empty() && prepared.size() == 1) {
    if (prepared[0].possible) search_one_phrase(index, positions, prepared[0], allowed, scorer, heap);
    heap.finalize(out);
    return;
  }
  std::vector<double> acc(index.num_slots(), 0.0);
  std::vector<std::uint8_t> hit(index.num_slots(), 0);
  std::vector<std::uint32_t> touched;
  auto touch = [&](std::uint32_t d) {
    if (!hit[d]) {
      hit[d] = 1;
      touched.push_back(d);
    }
  };
  if (!q.terms.empty()) {
    const Params& prm = index.params();
    const double absent = tf_component_absent(prm);
    for (std::size_t i = 0; i < q.terms.size(); ++i) {
      for_each_term_posting(index, q.terms[i], [&](std::uint32_t d, std::uint32_t tf) {
        if (!index.is_live(d) || !ok(d)) return;
        const double L = length_norm(prm, index.doc_len(d), index.avgdl());
        acc[d] += q.weights_d[i] * (tf_component<double>(prm.method, prm.k1, prm.delta, double(tf), L) - absent);
        touch(d);
      });
    }
  }
  for (const auto& p : prepared) {
    if (!p.possible) continue;
    intersect_each(index, positions, p, allowed, [&](std::uint32_t d, const std::size_t* entry) {
      const double pf = scorer.freq_at(p, entry);
      if (pf > 0) {
        acc[d] += scorer.part(p, pf, d);
        touch(d);
      }
    });
  }
  for (std::uint32_t d : touched) heap.insert(static_cast<float>(acc[d] + q.constant), d);
  heap.finalize(out);
}

double score_phrases(const InvertedIndex& index, const PositionStore& positions, const std::vector<QueryTerm>& plain,
                     const std::vector<PhraseQuery>& phrases, std::uint32_t doc, std::vector<double>* phrase_freqs) {
  const auto prepared = prepare_phrases(index, phrases);
  PhraseScorer scorer(index, positions);
  double score = 0.0;
  bool matched = false;
  for (const auto& te : index.explain(plain, doc)) {
    score += te.contribution;
    matched = matched || te.tf > 0;
  }
  if (phrase_freqs) phrase_freqs->clear();
  for (const auto& p : prepared) {
    const double pf = p.possible ? scorer.freq(p, doc) : 0.0;
    if (phrase_freqs) phrase_freqs->push_back(pf);
    if (pf > 0) {
      score += scorer.part(p, pf, doc);
      matched = true;
    }
  }
  return matched ? score : 0.0;
}

}  // namespace ragfind::bm25
