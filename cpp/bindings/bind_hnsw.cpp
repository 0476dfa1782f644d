// Bindings around hnswlib's Python index: the graph-file check that runs before
// hnswlib loads a file, the reader/writer lock of DenseIndex(kind="hnsw"), and the one call
// that turns a single query's raw knn_query result into ids and scores.
//
// Why a C++ finishing call: after an HNSW search has walked a few MB of vectors, the caches
// are cold, and every separate numpy operation on the tiny result cost 3-10 us on the
// development machine. Releasing the lock, checking the query, converting distances to scores,
// thresholding and mapping labels to ids in one call keeps the wrapper close to raw hnswlib.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "ragfind/common/rw_mutex.hpp"
#include "ragfind/dense/hnsw_graph_check.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

// Many readers or one writer; a waiting writer goes ahead of readers that arrive after it.
// Blocking waits release the GIL (a reader holding the lock may need the GIL to finish).
class ReaderWriterLock {
 public:
  void acquire_read() {
    if (mu_.try_lock_shared_gated()) return;
    py::gil_scoped_release release;
    mu_.lock_shared();
  }
  void release_read() { mu_.unlock_shared(); }
  void acquire_write() {
    if (mu_.try_lock_gated()) return;
    py::gil_scoped_release release;
    mu_.lock();
  }
  void release_write() { mu_.unlock(); }

 private:
  common::WriterPreferringSharedMutex mu_;
};

enum class HnswMetric : int { IP = 0, Cosine = 1, L2 = 2 };

py::tuple finish_single(ReaderWriterLock& lock, const py::array& labels, const py::array& dist, const py::array& q,
                        int metric, const py::object& threshold, int64_t n_labels, const py::object& label_map) {
  // The read lock is released before anything can throw: the caller has handed it over.
  lock.release_read();
  if (labels.dtype().kind() != 'u' || labels.itemsize() != 8 || dist.dtype().kind() != 'f' || dist.itemsize() != 4 ||
      labels.size() != dist.size() || !(labels.flags() & py::array::c_style) || !(dist.flags() & py::array::c_style))
    throw py::type_error("labels/dist must be hnswlib's uint64/float32 knn_query outputs");
  if (q.dtype().kind() != 'f' || q.itemsize() != 4 || q.ndim() != 1 || !(q.flags() & py::array::c_style))
    throw py::type_error("q must be a C-contiguous float32 vector");
  const auto* qp = static_cast<const float*>(q.data());
  double sq = 0.0;
  for (py::ssize_t i = 0; i < q.size(); ++i) sq += static_cast<double>(qp[i]) * qp[i];
  if (!std::isfinite(sq)) throw py::value_error("q contains NaN or infinity");
  const auto m = static_cast<HnswMetric>(metric);
  if (m == HnswMetric::Cosine && sq == 0.0) throw py::value_error("q is a zero vector; cosine is undefined");
  // hnswlib's "ip" distance is 1 - q.x (with the raw query for cosine: rows are unit vectors,
  // so dividing by |q| gives the cosine); "l2" is the squared distance, reported as is.
  const float scale = m == HnswMetric::Cosine ? static_cast<float>(1.0 / std::sqrt(sq)) : 1.0f;
  const bool has_threshold = !threshold.is_none();
  const float limit = has_threshold ? threshold.cast<float>() : 0.0f;
  const int64_t* map = nullptr;
  if (!label_map.is_none()) {
    auto arr = label_map.cast<py::array>();
    if (arr.dtype().kind() != 'i' || arr.itemsize() != 8 || arr.ndim() != 1 || arr.size() < n_labels ||
        !(arr.flags() & py::array::c_style))
      throw py::type_error("label_map must be an int64 vector covering every label");
    map = static_cast<const int64_t*>(arr.data());
  }
  const auto* lp = static_cast<const uint64_t*>(labels.data());
  const auto* dp = static_cast<const float*>(dist.data());
  const py::ssize_t n = labels.size();
  py::array_t<int64_t> ids(n);
  py::array_t<float> scores(n);
  int64_t* io = ids.mutable_data();
  float* so = scores.mutable_data();
  py::ssize_t kept = 0;
  for (py::ssize_t i = 0; i < n; ++i) {
    if (lp[i] >= static_cast<uint64_t>(n_labels))
      throw py::value_error("the HNSW graph returned a label this index never assigned (corrupt index file?)");
    const float s = m == HnswMetric::L2 ? dp[i] : (1.0f - dp[i]) * scale;
    if (has_threshold && (m == HnswMetric::L2 ? !(s <= limit) : !(s >= limit))) continue;
    io[kept] = map ? map[lp[i]] : static_cast<int64_t>(lp[i]);
    so[kept] = s;
    ++kept;
  }
  if (kept != n) {
    ids.resize({kept});
    scores.resize({kept});
  }
  return py::make_tuple(std::move(ids), std::move(scores));
}

}  // namespace

void bind_hnsw(py::module_& m) {
  py::class_<ReaderWriterLock>(m, "ReaderWriterLock",
                               "Writer-preferring reader/writer lock (blocking waits release the GIL).")
      .def(py::init<>())
      .def("acquire_read", &ReaderWriterLock::acquire_read)
      .def("release_read", &ReaderWriterLock::release_read)
      .def("acquire_write", &ReaderWriterLock::acquire_write)
      .def("release_write", &ReaderWriterLock::release_write);

  m.def("hnsw_finish_single", &finish_single, py::arg("lock"), py::arg("labels"), py::arg("dist"), py::arg("q"),
        py::arg("metric"), py::arg("threshold"), py::arg("n_labels"), py::arg("label_map"),
        "Finishes one DenseIndex HNSW search: releases the read lock the caller took, checks q\n"
        "(finite; non-zero for cosine, metric 1), turns hnswlib distances into scores (metric 0 ip,\n"
        "1 cosine, 2 l2), drops those past threshold, checks every label < n_labels and maps it\n"
        "through label_map (int64, or None for label == id). Returns (ids int64, scores float32).");

  m.def(
      "hnsw_check_graph",
      [](const py::buffer& graph, size_t dim) {
        const py::buffer_info info = graph.request();
        if (info.ndim != 1 || info.itemsize != 1) throw py::type_error("graph must be a 1-D byte buffer");
        dense::GraphSummary g;
        {
          py::gil_scoped_release release;
          g = dense::check_graph(static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size), dim);
        }
        py::array_t<uint64_t> labels(static_cast<py::ssize_t>(g.labels.size()));
        std::copy(g.labels.begin(), g.labels.end(), labels.mutable_data());
        py::array_t<bool> deleted(static_cast<py::ssize_t>(g.deleted.size()));
        std::copy(g.deleted.begin(), g.deleted.end(), deleted.mutable_data());
        py::dict out;
        out["max_elements"] = g.max_elements;
        out["count"] = g.count;
        out["M"] = g.M;
        out["ef_construction"] = g.ef_construction;
        out["max_level"] = g.max_level;
        out["labels"] = labels;
        out["deleted"] = deleted;
        return out;
      },
      py::arg("graph"), py::arg("dim"),
      "Checks an hnswlib graph file of float32 vectors of dimension dim (neighbour ids, list\n"
      "lengths, record layout, levels) before hnswlib loads it, which it does without checks.\n"
      "Returns max_elements, count, M, ef_construction, max_level, labels (uint64) and deleted\n"
      "(bool) per stored element; raises ValueError on the first inconsistency.");
}

}  // namespace ragfind::bindings
