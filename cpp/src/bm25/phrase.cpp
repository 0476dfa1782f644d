// Phrase queries (see phrase.hpp).
#include "ragfind/bm25/phrase.hpp"

#include <algorithm>
#include <limits>

namespace ragfind::bm25 {

void term_slots(const InvertedIndex& index, std::uint32_t term, std::vector<std::uint32_t>& out) {
  out.clear();
  for (const auto& seg : index.segments()) {
    const std::int64_t slot = seg->slot_of(term);
    if (slot < 0) continue;
    for_each_posting(*seg, static_cast<std::size_t>(slot), [&](std::uint32_t local, std::uint32_t) {
      const std::uint32_t d = seg->base + local;
      if (index.is_live(d)) out.push_back(d);
    });
  }
}

void term_postings(const InvertedIndex& index, std::uint32_t term, std::vector<std::uint32_t>& slots,
                   std::vector<std::uint32_t>& tfs) {
  slots.clear();
  tfs.clear();
  for (const auto& seg : index.segments()) {
    const std::int64_t slot = seg->slot_of(term);
    if (slot < 0) continue;
    for_each_posting(*seg, static_cast<std::size_t>(slot), [&](std::uint32_t local, std::uint32_t tf) {
      const std::uint32_t d = seg->base + local;
      if (!index.is_live(d)) return;
      slots.push_back(d);
      tfs.push_back(tf);
    });
  }
}

double phrase_frequency(const std::vector<const std::vector<std::int64_t>*>& lists,
                        const std::vector<std::uint32_t>& terms, std::int64_t slop, std::vector<std::int64_t>& cands) {
  const std::size_t n = lists.size();
  for (const auto* l : lists)
    if (l->empty()) return 0.0;
  bool repeated = false;
  for (std::size_t i = 0; i < n && !repeated; ++i)
    for (std::size_t j = i + 1; j < n; ++j) repeated = repeated || terms[i] == terms[j];
  double freq = 0.0;
  if (slop == 0 && !repeated) {
    for (std::int64_t a : *lists[0]) {
      bool ok = true;
      for (std::size_t i = 1; i < n && ok; ++i)
        ok = std::binary_search(lists[i]->begin(), lists[i]->end(), a + static_cast<std::int64_t>(i));
      if (ok) freq += 1.0;
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

namespace {

struct PreparedPhrase {
  std::vector<std::uint32_t> distinct;  // its distinct terms
  std::vector<std::size_t> list_of;     // per word: index into distinct
  std::vector<std::uint32_t> terms;
  std::int64_t slop;
  double idf;
  bool possible;
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
    out.push_back(std::move(p));
  }
  return out;
}

// Calls emit(slot, entry indexes) for each slot holding every distinct term of p (entry
// index j: into term j's list), in slot order, walking the shortest list and galloping in the
// others; pre(slot, shortest term, its entry index) may veto a slot before the others are
// searched (a vetoed slot is never emitted).
template <class Pre, class Emit>
void intersect_each(const PositionStore& ps, const PreparedPhrase& p, Pre&& pre, Emit&& emit) {
  const std::size_t nd = p.distinct.size();
  std::vector<const TermPositions*> tp(nd);
  for (std::size_t j = 0; j < nd; ++j) tp[j] = ps.term(p.distinct[j]);
  for (const auto* t : tp)
    if (!t || t->slots.empty()) return;
  std::size_t first = 0;
  for (std::size_t j = 1; j < nd; ++j)
    if (tp[j]->slots.size() < tp[first]->slots.size()) first = j;
  std::vector<std::size_t> at(nd, 0), here(nd);
  const auto& base = tp[first]->slots;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const std::uint32_t d = base[i];
    if (!pre(d, first, i)) continue;
    bool ok = true;
    for (std::size_t j = 0; j < nd && ok; ++j) {
      if (j == first) {
        here[j] = i;
        continue;
      }
      const auto& l = tp[j]->slots;
      // Gallop from the last position, then binary search.
      std::size_t lo = at[j], step = 1;
      while (lo + step < l.size() && l[lo + step] < d) {
        lo += step;
        step *= 2;
      }
      auto it = std::lower_bound(l.begin() + static_cast<std::ptrdiff_t>(lo),
                                 l.begin() + static_cast<std::ptrdiff_t>(std::min(l.size(), lo + step + 1)), d);
      at[j] = static_cast<std::size_t>(it - l.begin());
      if (at[j] == l.size()) return;  // no later slot can match either
      ok = *it == d;
      here[j] = at[j];
    }
    if (ok) emit(d, here.data());
  }
}

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

  // Phrase frequency of candidate c (entry indexes idx[c * nd ..]).
  double freq_at(const PreparedPhrase& p, const std::size_t* entry) {
    pos.resize(p.distinct.size());
    for (std::size_t j = 0; j < p.distinct.size(); ++j) positions.term(p.distinct[j])->positions(entry[j], pos[j]);
    return from_pos(p);
  }
  // freq_at() unless an upper bound of the score cannot beat `threshold` (then -1): the phrase
  // frequency is at most the first word's position count (each of its positions anchors at
  // most one match), and for an exact phrase at most every word's count; byte counts bound
  // those counts.
  double freq_above(const PreparedPhrase& p, const std::size_t* entry, std::uint32_t doc, float threshold) {
    pos.resize(p.distinct.size());
    std::uint64_t bound = ~std::uint64_t(0);
    for (std::size_t j = 0; j < p.distinct.size(); ++j) {
      const TermPositions* tp = positions.term(p.distinct[j]);
      entries[j] = tp->entry(entry[j], lens[j]);
      if (p.slop == 0 || j == p.list_of[0]) bound = std::min(bound, lens[j]);
    }
    if (static_cast<float>(part(p, static_cast<double>(bound), doc)) <= threshold) return -1.0;
    for (std::size_t j = 0; j < p.distinct.size(); ++j) TermPositions::decode(entries[j], lens[j], pos[j]);
    return from_pos(p);
  }
  std::vector<const std::uint8_t*> entries;
  std::vector<std::uint64_t> lens;
  // Phrase frequency of any slot (decodes the document; for explain).
  double freq(const PreparedPhrase& p, std::uint32_t doc) {
    positions.positions(doc, p.distinct.data(), p.distinct.size(), pos);
    return from_pos(p);
  }
  double from_pos(const PreparedPhrase& p) {
    lists.clear();
    for (std::size_t li : p.list_of) lists.push_back(&pos[li]);
    return phrase_frequency(lists, p.terms, p.slop, scratch);
  }
  double part(const PreparedPhrase& p, double pf, std::uint32_t doc) const {
    const double L = length_norm(index.params(), index.doc_len(doc), index.avgdl());
    return p.idf * (tf_component<double>(method, k1, delta, pf, L) - absent);
  }
};

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
  std::vector<std::uint32_t> cand;
  std::vector<std::size_t> idx;
  if (q.terms.empty() && prepared.size() == 1) {
    // One phrase alone: score candidates straight into the heap.
    const auto& p = prepared[0];
    if (p.possible) {
      const std::size_t nd = p.distinct.size();
      scorer.entries.resize(nd);
      scorer.lens.resize(nd);
      // Slots come in order, so one that only ties the k-th score loses the tie (TopKQueue
      // breaks ties by slot): skipping it when a bound of its score <= the threshold is exact.
      // Before the other lists are searched, the shortest list's position count bounds the
      // phrase frequency (any word's does for an exact phrase, the first word's for a slop).
      const bool base_bound_any = p.slop == 0;
      auto pre = [&](std::uint32_t d, std::size_t first, std::size_t i) {
        if (!index.is_live(d) || !ok(d)) return false;
        if (!heap.full() || !(base_bound_any || first == p.list_of[0])) return true;
        std::uint64_t len = 0;
        positions.term(p.distinct[first])->entry(i, len);
        return static_cast<float>(scorer.part(p, static_cast<double>(len), d)) > heap.threshold();
      };
      intersect_each(positions, p, pre, [&](std::uint32_t d, const std::size_t* entry) {
        const double pf = heap.full() ? scorer.freq_above(p, entry, d, heap.threshold()) : scorer.freq_at(p, entry);
        if (pf > 0) heap.insert(static_cast<float>(scorer.part(p, pf, d)), d);
      });
    }
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
    const double absent = tf_component_absent(index.params());
    std::vector<std::uint32_t> slots;
    for (std::size_t i = 0; i < q.terms.size(); ++i) {
      const std::uint32_t t = q.terms[i];
      for (const auto& seg : index.segments()) {
        const std::int64_t s = seg->slot_of(t);
        if (s < 0) continue;
        for_each_posting(*seg, static_cast<std::size_t>(s), [&](std::uint32_t local, std::uint32_t tf) {
          const std::uint32_t d = seg->base + local;
          if (!index.is_live(d) || !ok(d)) return;
          const double L = length_norm(index.params(), index.doc_len(d), index.avgdl());
          acc[d] += q.weights_d[i] * (tf_component<double>(index.params().method, index.params().k1,
                                                           index.params().delta, double(tf), L) -
                                      absent);
          touch(d);
        });
      }
    }
  }
  for (const auto& p : prepared) {
    if (!p.possible) continue;
    cand.clear();
    idx.clear();
    const std::size_t nd = p.distinct.size();
    intersect_each(
        positions, p, [&](std::uint32_t d, std::size_t, std::size_t) { return index.is_live(d) && ok(d); },
        [&](std::uint32_t d, const std::size_t* entry) {
          cand.push_back(d);
          idx.insert(idx.end(), entry, entry + nd);
        });
    for (std::size_t c = 0; c < cand.size(); ++c) {
      const std::uint32_t d = cand[c];
      const double pf = scorer.freq_at(p, &idx[c * nd]);
      if (pf > 0) {
        acc[d] += scorer.part(p, pf, d);
        touch(d);
      }
    }
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
