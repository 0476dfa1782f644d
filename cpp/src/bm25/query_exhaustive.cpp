// BM25's exhaustive top-k: its scorer (the length-code table, or a small index's float norms)
// handed to inverted/exhaustive.hpp. Used as the reference the MaxScore search is tested
// against, and by Auto for small segments.
#include "ragfind/bm25/doc_weight.hpp"
#include "ragfind/bm25/index.hpp"
#include "ragfind/inverted/exhaustive.hpp"

namespace ragfind::bm25 {

namespace {
// A small index's float norms score a posting as the length-code table does (same floats), and
// are cheaper to scatter with: the table's tests mispredict on corpora with many long documents.
template <Method M>
struct NormWeigher {
  DocWeight<M> dw;
  const float* norm;
  float operator()(std::uint32_t d, std::uint32_t tf) const { return dw(tf, norm[d]); }
};
}  // namespace

template <Method M, bool Filtered>
void InvertedIndex::exhaustive_segment(const Prepared& q, const Segment& seg, const std::uint8_t* allow,
                                       TopKQueue& heap) const {
  if (q.norm)
    inverted::exhaustive_compressed_segment<Filtered>(
        seg, q.terms, q.weights, NormWeigher<M>{DocWeight<M>(params_), q.norm + seg.base}, allow, heap);
  else inverted::exhaustive_compressed_segment<Filtered>(seg, q.terms, q.weights, weigher<M>(q, seg), allow, heap);
}

template void InvertedIndex::exhaustive_segment<Method::Lucene, false>(const Prepared&, const Segment&,
                                                                       const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Lucene, true>(const Prepared&, const Segment&,
                                                                      const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Robertson, false>(const Prepared&, const Segment&,
                                                                          const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Robertson, true>(const Prepared&, const Segment&,
                                                                         const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Atire, false>(const Prepared&, const Segment&,
                                                                      const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::Atire, true>(const Prepared&, const Segment&,
                                                                     const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25L, false>(const Prepared&, const Segment&,
                                                                      const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25L, true>(const Prepared&, const Segment&,
                                                                     const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25Plus, false>(const Prepared&, const Segment&,
                                                                         const std::uint8_t*, TopKQueue&) const;
template void InvertedIndex::exhaustive_segment<Method::BM25Plus, true>(const Prepared&, const Segment&,
                                                                        const std::uint8_t*, TopKQueue&) const;

}  // namespace ragfind::bm25
