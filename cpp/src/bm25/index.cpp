// InvertedIndex: building segments, merging them, deleting and compacting documents,
// statistics, explain and the double-precision reference scorers. The pruned top-k is the
// dispatch in query_maxscore.cpp onto inverted/'s generic algorithms; the exhaustive top-k is
// in query_exhaustive.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "ragfind/bm25/index.hpp"

namespace ragfind::bm25 {

InvertedIndex::InvertedIndex(Params params) : params_(params) {}

void InvertedIndex::set_params(const Params& p) {
  params_ = p;
  after_change(false, true);
}

std::uint64_t InvertedIndex::num_postings() const {
  std::uint64_t n = 0;
  for (const auto& s : segments_) n += s->num_postings() - s->dead_postings;
  return n;
}

std::size_t InvertedIndex::memory_bytes() const {
  std::size_t n = vocab_.memory_bytes() + df_.capacity() * 8 + codes_.code.capacity() + sizeof(WeightTable) +
                  float_norm_.capacity() * 4 + live_.capacity();
  if (doc_len_.owned()) n += doc_len_.size() * 4;
  for (const auto& s : segments_) {
    if (s->packed.owned())
      n += s->packed.size() * 4 + s->num_blocks() * 10 + s->offsets.size() * 8 + s->term_ids.size() * 4;
    n += s->list_block.capacity() * 8;
    // block maxima: state words; the blocks themselves only once built (counted as if all were)
    n += s->directory_size() * 8 + s->num_blocks() * sizeof(BlockInfo);
    n += s->directory_size() * 8 + s->fwd_offsets.capacity() * 8 + s->fwd_terms.capacity() * 4;
    // the per-list top-weight cache, counted whole like the bound cache above
    n += s->directory_size() * 8 * kKthLevels.size();
  }
  return n;
}

void InvertedIndex::after_change(bool rescalable, bool appended_only) {
  // Bounded history: past it, every cached bound is recomputed once on its next use.
  constexpr std::size_t kEpochHistory = 4096;
  ++epoch_;
  const double avg = avgdl();
  if (!rescalable || epoch_avgdl_.empty() || epoch_avgdl_.size() >= kEpochHistory) {
    epoch_avgdl_.clear();
    rescalable_from_ = epoch_;
  }
  epoch_avgdl_.push_back(avg);
  // Slots only appended since (an add): their codes appended; else (a compaction renumbered
  // them, or a load) all chosen again.
  if (!appended_only || !codes_.extend(doc_len_.data(), num_slots())) codes_.build(doc_len_.data(), num_slots());
  build_weight_table(params_, avg, codes_, table_);
  float_norm_.clear();
  if (num_slots() <= kFloatNormSlots) {
    float_norm_.resize(num_slots());
    for (std::uint32_t d = 0; d < num_slots(); ++d) float_norm_[d] = doc_norm(params_, doc_len_[d], avg);
  } else {
    float_norm_.shrink_to_fit();
  }
}

double InvertedIndex::rescalable_avgdl(std::uint32_t e) const {
  if (e < rescalable_from_ || e >= epoch_) return 0.0;
  return epoch_avgdl_[e - rescalable_from_];
}

void InvertedIndex::add_documents(const std::uint32_t* terms, const std::uint8_t* counted,
                                  const std::size_t* doc_offsets, std::size_t n) {
  add_chunk(terms, counted, doc_offsets, n);
  commit_chunks();
}

void InvertedIndex::abort_chunks() {
  pending_.clear();
  pending_len_.clear();
  pending_total_ = 0;
}

void InvertedIndex::commit_chunks() {
  if (pending_.empty()) return;
  std::unique_ptr<Segment> seg;
  if (pending_.size() == 1) {
    seg = std::move(pending_.front());
  } else {
    std::vector<const Segment*> parts;
    for (const auto& p : pending_) parts.push_back(p.get());
    seg = merge_segments(parts, false);
  }
  df_.resize(vocab_.size(), 0);
  for (std::size_t slot = 0; slot < seg->directory_size(); ++slot) {
    const std::uint32_t t = seg->term_ids.empty() ? static_cast<std::uint32_t>(slot) : seg->term_ids[slot];
    df_[t] += seg->offsets[slot + 1] - seg->offsets[slot];
  }
  auto& dl = doc_len_.mutable_vec();
  dl.insert(dl.end(), pending_len_.begin(), pending_len_.end());
  live_.resize(dl.size(), 1);
  num_live_ += static_cast<std::uint32_t>(pending_len_.size());
  total_len_ += pending_total_;
  abort_chunks();
  segments_.push_back(std::move(seg));
  merge_tail_segments();
  after_change(true, true);
}

void InvertedIndex::add_chunk(const std::uint32_t* terms, const std::uint8_t* counted, const std::size_t* doc_offsets,
                              std::size_t n) {
  if (n == 0) return;
  const std::size_t V = vocab_.size();
  const std::uint64_t base = static_cast<std::uint64_t>(num_slots()) + pending_len_.size();
  if (base + n > 0xFFFFFFF0ull) throw std::length_error("add: too many documents");
  for (std::size_t i = doc_offsets[0]; i < doc_offsets[n]; ++i)
    if (terms[i] >= V) throw std::out_of_range("add: term id out of range");

  // Per document: its distinct terms with their frequencies (sort + run-length).
  std::vector<std::uint32_t> pt, ptf, lens(n);
  std::vector<std::size_t> pdoc(n + 1, 0);
  pt.reserve(doc_offsets[n] - doc_offsets[0]);
  ptf.reserve(pt.capacity());
  std::vector<std::uint32_t> scratch;
  std::uint64_t added_len = 0;
  for (std::size_t i = 0; i < n; ++i) {
    scratch.assign(terms + doc_offsets[i], terms + doc_offsets[i + 1]);
    std::uint64_t len = 0;
    if (counted) {
      for (std::size_t j = doc_offsets[i]; j < doc_offsets[i + 1]; ++j) len += counted[j];
    } else {
      len = scratch.size();
    }
    if (len > 0xFFFFFFFFull) throw std::length_error("add: document longer than 2^32 tokens");
    lens[i] = static_cast<std::uint32_t>(len);
    added_len += len;
    std::sort(scratch.begin(), scratch.end());
    for (std::size_t j = 0; j < scratch.size();) {
      std::size_t e = j + 1;
      while (e < scratch.size() && scratch[e] == scratch[j]) ++e;
      pt.push_back(scratch[j]);
      ptf.push_back(static_cast<std::uint32_t>(e - j));
      j = e;
    }
    pdoc[i + 1] = pt.size();
  }

  auto seg = std::make_unique<Segment>();
  seg->base = static_cast<std::uint32_t>(base);
  seg->num_docs = static_cast<std::uint32_t>(n);
  // Term directory: sparse (sorted distinct terms) for batches much smaller than the
  // vocabulary, so a one-document add costs O(its terms), not O(vocabulary); dense otherwise.
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint32_t> term_ids;
  std::vector<std::uint32_t> slot_of_posting(pt.size());
  const bool sparse = pt.size() * 8 < V;
  if (sparse) {
    term_ids = pt;
    std::sort(term_ids.begin(), term_ids.end());
    term_ids.erase(std::unique(term_ids.begin(), term_ids.end()), term_ids.end());
    offsets.assign(term_ids.size() + 1, 0);
    for (std::size_t j = 0; j < pt.size(); ++j) {
      const auto slot =
          static_cast<std::uint32_t>(std::lower_bound(term_ids.begin(), term_ids.end(), pt[j]) - term_ids.begin());
      slot_of_posting[j] = slot;
      ++offsets[slot + 1];
    }
  } else {
    offsets.assign(V + 1, 0);
    for (std::size_t j = 0; j < pt.size(); ++j) {
      slot_of_posting[j] = pt[j];
      ++offsets[pt[j] + 1];
    }
  }
  for (std::size_t i = 1; i < offsets.size(); ++i) offsets[i] += offsets[i - 1];
  std::vector<std::uint64_t> fill(offsets.begin(), offsets.end() - 1);  // next write position per slot
  std::vector<std::uint32_t> docs(pt.size()), tfs(pt.size());
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = pdoc[i]; j < pdoc[i + 1]; ++j) {
      const std::uint64_t at = fill[slot_of_posting[j]]++;
      docs[at] = static_cast<std::uint32_t>(i);
      tfs[at] = ptf[j];
    }
  }
  seg->term_ids = Buffer<std::uint32_t>(std::move(term_ids));
  seg->offsets = Buffer<std::uint64_t>(std::move(offsets));
  seg->docs = Buffer<std::uint32_t>(std::move(docs));
  seg->values = Buffer<std::uint32_t>(std::move(tfs));
  compress_segment(*seg);
  seg->reset_bounds();

  pending_len_.insert(pending_len_.end(), lens.begin(), lens.end());
  pending_total_ += added_len;
  pending_.push_back(std::move(seg));
}

void InvertedIndex::merge_tail_segments() {
  while (segments_.size() >= 2) {
    const Segment& last = *segments_[segments_.size() - 1];
    const Segment& prev = *segments_[segments_.size() - 2];
    if (last.num_postings() * 2 < prev.num_postings() && last.num_docs * 2 < prev.num_docs) break;
    std::vector<const Segment*> two{&prev, &last};
    auto merged = merge_segments(two, false);
    segments_.pop_back();
    segments_.back() = std::move(merged);
  }
}

// Concatenates the postings (and forward indexes) of consecutive segments term by term. With
// drop_dead, dead documents are left out and the others renumbered densely in order; the output
// starts at segs[0]->base either way (compact() moves it).
std::unique_ptr<Segment> InvertedIndex::merge_segments(const std::vector<const Segment*>& segs, bool drop_dead) const {
  const std::size_t V = vocab_.size();
  const std::uint32_t out_base = segs.front()->base;
  std::uint32_t total_docs = 0;
  for (const Segment* s : segs) total_docs += s->num_docs;
  // New local number of each input document (relative to out_base); kGone when dropped.
  constexpr std::uint32_t kGone = 0xFFFFFFFFu;
  std::vector<std::uint32_t> remap;
  std::uint32_t new_num_docs = total_docs;
  if (drop_dead) {
    remap.resize(total_docs);
    std::uint32_t next = 0;
    for (std::uint32_t i = 0; i < total_docs; ++i) remap[i] = live_[out_base + i] ? next++ : kGone;
    new_num_docs = next;
  }
  bool all_sparse = true;
  for (const Segment* s : segs) all_sparse = all_sparse && !s->term_ids.empty();
  std::vector<std::uint32_t> candidates;  // terms that may have postings
  if (all_sparse) {
    for (const Segment* s : segs) candidates.insert(candidates.end(), s->term_ids.begin(), s->term_ids.end());
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  }
  const bool sparse = all_sparse && candidates.size() * 8 < V;
  std::uint64_t total = 0;
  for (const Segment* s : segs) total += s->num_postings() - (drop_dead ? s->dead_postings : 0);
  std::vector<std::uint32_t> term_ids;
  PostingsWriter postings;
  postings.reserve(total);
  std::vector<std::uint64_t> offsets;
  offsets.reserve((sparse ? candidates.size() : V) + 1);
  offsets.push_back(0);
  auto emit_term = [&](std::uint32_t t) {
    for (const Segment* s : segs) {
      const std::int64_t slot = s->slot_of(t);
      if (slot < 0) continue;
      const std::uint32_t shift = s->base - out_base;
      for_each_posting(*s, static_cast<std::size_t>(slot), [&](std::uint32_t d, std::uint32_t tf) {
        const std::uint32_t local = shift + d;
        if (!drop_dead) {
          postings.add(local, tf);
        } else if (remap[local] != kGone) {
          postings.add(remap[local], tf);
        }
      });
    }
    postings.end_list();
  };
  if (sparse) {
    for (std::uint32_t t : candidates) {
      const std::uint64_t before = postings.num_postings();
      emit_term(t);
      if (postings.num_postings() == before) continue;
      term_ids.push_back(t);
      offsets.push_back(postings.num_postings());
    }
  } else if (all_sparse) {
    std::size_t c = 0;
    for (std::size_t t = 0; t < V; ++t) {
      if (c < candidates.size() && candidates[c] == t) {
        emit_term(static_cast<std::uint32_t>(t));
        ++c;
      }
      offsets.push_back(postings.num_postings());
    }
  } else {
    for (std::size_t t = 0; t < V; ++t) {
      emit_term(static_cast<std::uint32_t>(t));
      offsets.push_back(postings.num_postings());
    }
  }
  auto out = std::make_unique<Segment>();
  out->base = out_base;
  out->num_docs = new_num_docs;
  // Forward indexes, in document order, when every input has one (else built on demand).
  bool forward = true;
  for (const Segment* s : segs) forward = forward && s->has_forward;
  if (forward) {
    out->has_forward = true;
    out->fwd_offsets.reserve(static_cast<std::size_t>(new_num_docs) + 1);
    out->fwd_offsets.push_back(0);
    out->fwd_terms.reserve(total);
  }
  for (const Segment* s : segs) {
    for (std::uint32_t d = 0; forward && d < s->num_docs; ++d) {
      if (drop_dead && !live_[s->base + d]) continue;
      out->fwd_terms.insert(out->fwd_terms.end(), s->fwd_terms.begin() + static_cast<std::ptrdiff_t>(s->fwd_offsets[d]),
                            s->fwd_terms.begin() + static_cast<std::ptrdiff_t>(s->fwd_offsets[d + 1]));
      out->fwd_offsets.push_back(out->fwd_terms.size());
    }
    if (!drop_dead) {
      out->num_dead += s->num_dead;
      out->dead_postings += s->dead_postings;
    }
  }
  out->term_ids = Buffer<std::uint32_t>(std::move(term_ids));
  out->offsets = Buffer<std::uint64_t>(std::move(offsets));
  postings.finish(*out);
  out->reset_bounds();
  return out;
}

std::size_t InvertedIndex::segment_index(std::uint32_t slot) const {
  // Segments are in increasing base order; the last one whose base <= slot.
  std::size_t lo = 0, hi = segments_.size();
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    if (segments_[mid]->base <= slot) lo = mid;
    else hi = mid;
  }
  return lo;
}

void InvertedIndex::delete_documents(const std::vector<std::uint32_t>& docs) {
  if (docs.empty()) return;
  for (std::size_t i = 0; i < docs.size(); ++i)
    if (docs[i] >= num_slots() || !live_[docs[i]] || (i > 0 && docs[i] <= docs[i - 1]))
      throw std::invalid_argument("delete_documents: slots must be sorted, unique and live");
  for (std::uint32_t d : docs) {
    Segment& s = *segments_[segment_index(d)];
    s.ensure_forward();
    const std::uint32_t local = d - s.base;
    const std::uint64_t b = s.fwd_offsets[local], e = s.fwd_offsets[local + 1];
    for (std::uint64_t j = b; j < e; ++j) --df_[s.fwd_terms[j]];
    s.dead_postings += e - b;
    ++s.num_dead;
    s.deleted_epoch = epoch_ + 1;  // the epoch after_change() below starts
    live_[d] = 0;
    --num_live_;
    total_len_ -= doc_len_[d];
  }
  after_change(true, true);
}

std::vector<std::uint32_t> InvertedIndex::compact(bool all) {
  auto due = [&](const Segment& s) {
    return s.num_dead > 0 && (all || s.num_dead == s.num_docs ||
                              static_cast<double>(s.num_dead) > kCompactDeadFraction * static_cast<double>(s.num_docs));
  };
  bool any = false;
  for (const auto& s : segments_) any = any || due(*s);
  if (!any) return {};
  std::vector<std::uint32_t> dropped;
  std::vector<std::unique_ptr<Segment>> out;
  std::vector<std::uint32_t> new_len;
  std::vector<std::uint8_t> new_live;
  new_len.reserve(num_slots());
  new_live.reserve(num_slots());
  for (auto& seg : segments_) {
    const auto nb = static_cast<std::uint32_t>(new_len.size());
    const std::uint32_t b = seg->base;
    if (!due(*seg)) {
      new_len.insert(new_len.end(), doc_len_.begin() + b, doc_len_.begin() + b + seg->num_docs);
      new_live.insert(new_live.end(), live_.begin() + b, live_.begin() + b + seg->num_docs);
      seg->base = nb;
      out.push_back(std::move(seg));
      continue;
    }
    for (std::uint32_t d = b; d < b + seg->num_docs; ++d) {
      if (live_[d]) {
        new_len.push_back(doc_len_[d]);
        new_live.push_back(1);
      } else {
        dropped.push_back(d);
      }
    }
    if (seg->num_dead < seg->num_docs) {
      std::vector<const Segment*> one{seg.get()};
      auto fresh = merge_segments(one, true);
      fresh->base = nb;
      out.push_back(std::move(fresh));
    }
    seg.reset();
  }
  segments_.swap(out);
  out.clear();
  new_len.shrink_to_fit();
  new_live.shrink_to_fit();
  doc_len_ = Buffer<std::uint32_t>(std::move(new_len));
  doc_len_keepalive_.reset();
  live_.swap(new_live);
  after_change(true, false);
  return dropped;
}

void InvertedIndex::install(Buffer<std::uint32_t> doc_len, std::unique_ptr<Segment> seg,
                            std::shared_ptr<const void> keepalive) {
  doc_len_ = std::move(doc_len);
  doc_len_keepalive_ = std::move(keepalive);
  live_.assign(doc_len_.size(), 1);
  num_live_ = static_cast<std::uint32_t>(doc_len_.size());
  total_len_ = 0;
  for (std::uint32_t v : doc_len_) total_len_ += v;
  df_.assign(vocab_.size(), 0);
  segments_.clear();
  if (seg) {
    for (std::size_t slot = 0; slot < seg->directory_size(); ++slot) {
      const std::uint32_t t = seg->term_ids.empty() ? static_cast<std::uint32_t>(slot) : seg->term_ids[slot];
      df_[t] = seg->offsets[slot + 1] - seg->offsets[slot];
    }
    seg->reset_bounds();
    if (seg->num_docs > 0) segments_.push_back(std::move(seg));
  }
  after_change(false, false);
}

InvertedIndex::Prepared InvertedIndex::prepare(const std::vector<QueryTerm>& query) const {
  Prepared p;
  p.avgdl = avgdl();
  const double n = num_docs();
  const double absent = tf_component_absent(params_);
  // Merge repeated terms, keeping the order of first occurrence (the summation order).
  struct Item {
    std::uint32_t term;
    std::size_t first;
    std::uint64_t count;
  };
  std::vector<Item> items;
  items.reserve(query.size());
  for (std::size_t i = 0; i < query.size(); ++i) {
    const QueryTerm& qt = query[i];
    if (qt.term >= df_.size() || df_[qt.term] == 0 || qt.count == 0) continue;
    items.push_back({qt.term, i, qt.count});
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.term < b.term || (a.term == b.term && a.first < b.first); });
  std::size_t w = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (w > 0 && items[w - 1].term == items[i].term) {
      items[w - 1].count += items[i].count;
    } else {
      items[w++] = items[i];
    }
  }
  items.resize(w);
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.first < b.first; });
  for (const Item& it : items) {
    const double wt = static_cast<double>(it.count) * idf(params_, static_cast<double>(df_[it.term]), n);
    p.constant += wt * absent;
    if (wt <= 0) continue;
    p.terms.push_back(it.term);
    p.weights.push_back(static_cast<float>(wt));
    p.weights_d.push_back(wt);
  }
  p.table = &table_;
  p.norm = float_norm_.empty() ? nullptr : float_norm_.data();
  p.epoch = epoch_;
  return p;
}

InvertedIndex::Prepared InvertedIndex::prepare(const std::vector<QueryTerm>& query,
                                               const CollectionStats& stats) const {
  if (stats.df.size() != query.size()) throw std::invalid_argument("stats: one df per query term expected");
  Prepared p;
  p.avgdl = stats.avgdl();
  const double n = static_cast<double>(stats.num_docs);
  const double absent = tf_component_absent(params_);
  for (std::size_t i = 0; i < query.size(); ++i) {
    const QueryTerm& qt = query[i];
    if (stats.df[i] == 0 || qt.count == 0) continue;
    const double wt = static_cast<double>(qt.count) * idf(params_, static_cast<double>(stats.df[i]), n);
    p.constant += wt * absent;
    if (wt <= 0 || qt.term == kForeignTerm || df(qt.term) == 0) continue;
    p.terms.push_back(qt.term);
    p.weights.push_back(static_cast<float>(wt));
    p.weights_d.push_back(wt);
  }
  const double avg = stats.avgdl();
  if (avg == avgdl()) {
    p.table = &table_;
    p.norm = float_norm_.empty() ? nullptr : float_norm_.data();
    p.epoch = epoch_;
  } else {
    auto table = table_for(avg, p.epoch);
    p.table = table.get();
    p.hold = std::move(table);
  }
  return p;
}

std::shared_ptr<const WeightTable> InvertedIndex::table_for(double avgdl, std::uint32_t& epoch) const {
  // One cached table: a shard sees the same global avgdl on every query between two writes.
  std::lock_guard<std::mutex> lock(override_mu_);
  if (!override_.table || override_.avgdl != avgdl || override_.index_epoch != epoch_) {
    auto table = std::make_shared<WeightTable>();
    build_weight_table(params_, avgdl, codes_, *table);
    override_.avgdl = avgdl;
    override_.index_epoch = epoch_;
    override_.epoch = 0x80000000u | (++override_epochs_ & 0x7FFFFFFFu);
    override_.table = std::move(table);
  }
  epoch = override_.epoch;
  return override_.table;
}

std::uint32_t InvertedIndex::term_frequency(std::uint32_t term, std::uint32_t doc) const {
  for (const auto& s : segments_) {
    if (doc < s->base || doc >= s->base + s->num_docs) continue;
    const std::int64_t slot = s->slot_of(term);
    if (slot < 0) return 0;
    const std::uint32_t local = doc - s->base;
    PostingCursor c;
    c.reset(*s, static_cast<std::size_t>(slot));
    c.next_geq(local);
    return c.doc() == local ? c.tf() : 0;
  }
  return 0;
}

std::vector<TermExplanation> InvertedIndex::explain(const std::vector<QueryTerm>& query, std::uint32_t doc) const {
  std::vector<TermExplanation> out;
  const double n = num_docs();
  const double L = length_norm(params_, doc_len_[doc], avgdl());
  for (const QueryTerm& qt : query) {
    TermExplanation e{};
    e.term = qt.term;
    e.query_count = qt.count;
    e.df = df(qt.term);
    e.length_norm = L;
    if (e.df == 0) {
      out.push_back(e);
      continue;
    }
    e.idf = idf(params_, static_cast<double>(e.df), n);
    e.tf = term_frequency(qt.term, doc);
    e.tf_component = e.tf > 0 ? tf_component<double>(params_.method, params_.k1, params_.delta, e.tf, L)
                              : tf_component_absent(params_);
    e.contribution = qt.count * e.idf * e.tf_component;
    out.push_back(e);
  }
  return out;
}

void InvertedIndex::score_all(const std::vector<QueryTerm>& query, double* out) const {
  const Prepared p = prepare(query);
  const std::uint32_t n = num_slots();
  const double absent = tf_component_absent(params_);
  for (std::uint32_t d = 0; d < n; ++d) out[d] = p.constant;
  const double avg = avgdl();
  for (std::size_t i = 0; i < p.terms.size(); ++i) {
    const std::uint32_t t = p.terms[i];
    const double w = p.weights_d[i];
    for (const auto& s : segments_) {
      const std::int64_t slot = s->slot_of(t);
      if (slot < 0) continue;
      for_each_posting(*s, static_cast<std::size_t>(slot), [&](std::uint32_t local, std::uint32_t tf) {
        const std::uint32_t d = s->base + local;
        const double L = length_norm(params_, doc_len_[d], avg);
        out[d] += w * (tf_component<double>(params_.method, params_.k1, params_.delta, tf, L) - absent);
      });
    }
  }
}

void InvertedIndex::score_all_rank_bm25(const std::vector<std::int64_t>& terms, const std::vector<double>& weights,
                                        int kind, double k1, double b, double delta, double* out) const {
  const std::uint32_t n = num_slots();
  for (std::uint32_t d = 0; d < n; ++d) out[d] = 0.0;
  if (num_live_ == 0) return;
  // rank_bm25: avgdl = num_doc / corpus_size, and its numpy expressions evaluated left to right.
  const double avg = static_cast<double>(total_len_) / static_cast<double>(num_live_);
  std::vector<std::uint32_t> tf_of(kind == 2 ? n : 0);
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const double idf_w = weights[i];
    if (terms[i] < 0 || static_cast<std::size_t>(terms[i]) >= df_.size() || idf_w == 0.0) continue;
    const auto t = static_cast<std::uint32_t>(terms[i]);
    if (kind == 2) std::fill(tf_of.begin(), tf_of.end(), 0u);
    for (const auto& s : segments_) {
      const std::int64_t slot = s->slot_of(t);
      if (slot < 0) continue;
      for_each_posting(*s, static_cast<std::size_t>(slot), [&](std::uint32_t local, std::uint32_t tf_u) {
        const std::uint32_t d = s->base + local;
        const double tf = tf_u;
        const double dl = doc_len_[d];
        const double L = (1.0 - b) + b * dl / avg;
        if (kind == 0) {
          out[d] += idf_w * (tf * (k1 + 1) / (tf + k1 * L));
        } else if (kind == 1) {
          const double ctd = tf / L;
          out[d] += idf_w * tf * (k1 + 1) * (ctd + delta) / (k1 + ctd + delta);
        } else {
          tf_of[d] = tf_u;
        }
      });
    }
    if (kind == 2) {
      for (std::uint32_t d = 0; d < n; ++d) {
        const double tf = tf_of[d];
        const double L = (1.0 - b) + b * static_cast<double>(doc_len_[d]) / avg;
        out[d] += idf_w * (delta + (tf * (k1 + 1)) / (k1 * L + tf));
      }
    }
  }
}

}  // namespace ragfind::bm25
