// hnswlib graph layout (HierarchicalNSW::saveIndex, little-endian, hnswlib 0.7-0.8):
//   header: size_t offsetLevel0, max_elements, cur_element_count, size_data_per_element,
//           label_offset, offsetData; int maxlevel; uint32 enterpoint_node;
//           size_t maxM, maxM0, M; double mult; size_t ef_construction
//   level 0: cur_element_count records of size_data_per_element bytes:
//           [uint16 count, uint8 deleted flag, uint8 unused, maxM0 x uint32 neighbours]
//           [dim x float32 vector] [size_t label]
//   upper levels: per element a uint32 byte size, then level x [uint32 count, maxM x uint32]
#include "ragfind/dense/hnsw_graph_check.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

namespace ragfind::dense {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("the HNSW graph is inconsistent: " + what);
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T read(const char* field) {
    if (size_ - pos_ < sizeof(T)) bad(std::string("truncated at ") + field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  const uint8_t* take(size_t n, const char* what) {
    if (size_ - pos_ < n) bad(std::string("truncated in ") + what);
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Neighbour list of `slots` ids starting at p: count <= slots, every id a stored element.
void check_links(const uint8_t* p, size_t slots, uint64_t count, size_t element, int level) {
  const uint16_t n = load_u16(p);
  if (n > slots)
    bad("element " + std::to_string(element) + " lists " + std::to_string(n) + " neighbours at level " +
        std::to_string(level) + ", more than the " + std::to_string(slots) + " allowed");
  for (uint16_t j = 0; j < n; ++j) {
    const uint32_t nb = load_u32(p + 4 + 4 * size_t{j});
    if (nb >= count)
      bad("element " + std::to_string(element) + " links to element " + std::to_string(nb) + " of " +
          std::to_string(count));
  }
}

}  // namespace

GraphSummary check_graph(const uint8_t* data, size_t size, size_t dim) {
  Reader r(data, size);
  const auto offset_level0 = r.read<uint64_t>("offsetLevel0");
  const auto max_elements = r.read<uint64_t>("max_elements");
  const auto count = r.read<uint64_t>("cur_element_count");
  const auto size_per_element = r.read<uint64_t>("size_data_per_element");
  const auto label_offset = r.read<uint64_t>("label_offset");
  const auto offset_data = r.read<uint64_t>("offsetData");
  const auto max_level = r.read<int32_t>("maxlevel");
  const auto entry_point = r.read<uint32_t>("enterpoint_node");
  const auto max_m = r.read<uint64_t>("maxM");
  const auto max_m0 = r.read<uint64_t>("maxM0");
  const auto m = r.read<uint64_t>("M");
  const auto mult = r.read<double>("mult");
  const auto ef_construction = r.read<uint64_t>("ef_construction");

  // hnswlib sets maxM = M and maxM0 = 2 M; the list length is a uint16.
  if (m < 2 || m > 10000 || max_m != m || max_m0 != 2 * m) bad("M, maxM and maxM0 disagree");
  if (!(std::isfinite(mult) && std::fabs(mult - 1.0 / std::log(static_cast<double>(m))) < 1e-9))
    bad("the level multiplier is not 1/ln(M)");
  if (ef_construction < 1 || ef_construction >= (uint64_t{1} << 31)) bad("ef_construction out of range");
  const uint64_t links0 = 4 + 4 * max_m0;
  if (offset_level0 != 0 || offset_data != links0 || label_offset != offset_data + 4 * uint64_t{dim} ||
      size_per_element != label_offset + 8)
    bad("the record layout does not match float32 vectors of dimension " + std::to_string(dim));
  if (count > max_elements) bad("more elements than max_elements");
  if (count != 0 && size_per_element > r.remaining() / count) bad("level-0 records are truncated");
  if (count == 0 ? (max_level != -1) : (max_level < 0 || entry_point >= count))
    bad("the entry point or the top level is out of range");

  GraphSummary out;
  out.max_elements = max_elements;
  out.count = count;
  out.M = m;
  out.ef_construction = ef_construction;
  out.max_level = max_level;
  out.labels.resize(count);
  out.deleted.resize(count);

  const uint8_t* level0 = r.take(count * size_per_element, "level-0 records");
  std::unordered_set<uint64_t> seen;
  seen.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* rec = level0 + i * size_per_element;
    check_links(rec, max_m0, count, i, 0);
    if (rec[2] > 1) bad("element " + std::to_string(i) + " has an unknown deleted flag");
    out.deleted[i] = rec[2];
    std::memcpy(&out.labels[i], rec + label_offset, 8);
    if (!seen.insert(out.labels[i]).second) bad("label " + std::to_string(out.labels[i]) + " is stored twice");
  }

  // Upper levels: a search walking level L from a node only follows neighbours that also
  // reach level L, and the entry point must reach the top level.
  const uint64_t links_upper = 4 + 4 * max_m;
  std::vector<int32_t> levels(count, 0);
  std::vector<const uint8_t*> upper(count, nullptr);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bytes = r.read<uint32_t>("an upper-level size");
    if (bytes % links_upper != 0) bad("element " + std::to_string(i) + " has a torn upper-level list");
    const uint64_t level = bytes / links_upper;
    if (level > static_cast<uint64_t>(max_level)) bad("element " + std::to_string(i) + " is above the top level");
    levels[i] = static_cast<int32_t>(level);
    upper[i] = bytes ? r.take(bytes, "upper-level lists") : nullptr;
  }
  if (r.remaining() != 0) bad(std::to_string(r.remaining()) + " trailing bytes");
  if (count != 0 && levels[entry_point] != max_level) bad("the entry point is not on the top level");
  for (size_t i = 0; i < count; ++i) {
    for (int32_t level = 1; level <= levels[i]; ++level) {
      const uint8_t* list = upper[i] + (level - 1) * links_upper;
      check_links(list, max_m, count, i, level);
      for (uint16_t j = 0, n = load_u16(list); j < n; ++j) {
        if (levels[load_u32(list + 4 + 4 * size_t{j})] < level)
          bad("element " + std::to_string(i) + " links at level " + std::to_string(level) + " to an element below it");
      }
    }
  }
  return out;
}

}  // namespace ragfind::dense
