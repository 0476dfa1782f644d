// Bindings for the similarity kernels and the exact dense index.
//
// These are the low-level entry points behind ragfind.DenseIndex and ragfind.dense: every
// argument is validated here with the GIL held (ValueError/TypeError naming it), then the
// GIL is released for the scan. Arrays are never copied or cast silently: the Python layer
// decides conversions and documents them.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "bindings.hpp"
#include "ragfind/dense/exact_search.hpp"
#include "ragfind/dense/ivf.hpp"
#include "ragfind/dense/kmeans.hpp"
#include "ragfind/dense/similarity.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

using dense::Metric;
using dense::RowsView;
using dense::Storage;

std::string dtype_str(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

Storage parse_storage(const std::string& s) {
  if (s == "f32") return Storage::F32;
  if (s == "f16") return Storage::F16;
  if (s == "i8") return Storage::I8;
  fail_value("storage must be 'f32', 'f16' or 'i8', got '" + s + "'");
}

Metric parse_metric(const std::string& s) {
  if (s == "ip") return Metric::IP;
  if (s == "l2") return Metric::L2;
  fail_value("metric must be 'ip' or 'l2' (cosine is ip over normalised rows), got '" + s + "'");
}

bool c_contig(const py::array& a) { return (a.flags() & py::array::c_style) != 0; }

// Checks a C-contiguous array of the given numpy kind/itemsize and rank.
void check_array(const py::array& a, const char* name, char kind, size_t itemsize, int ndim) {
  if (a.dtype().kind() != kind || static_cast<size_t>(a.itemsize()) != itemsize) {
    const char* want = kind == 'f' ? (itemsize == 4 ? "float32" : "float16") : itemsize == 1 ? "int8" : "uint8";
    if (kind == 'u') want = "uint8";
    fail_type(std::string(name) + " must have dtype " + want + ", got " + dtype_str(a));
  }
  if (a.ndim() != ndim)
    fail_value(std::string(name) + " must be " + std::to_string(ndim) + "-D, got " + std::to_string(a.ndim()) + "-D");
  if (!c_contig(a)) fail_value(std::string(name) + " must be C-contiguous");
}

RowsView make_rows(const py::array& data, const std::string& storage, const py::object& scales,
                   const py::object& sqnorms, Metric metric) {
  RowsView v;
  v.storage = parse_storage(storage);
  switch (v.storage) {
    case Storage::F32: check_array(data, "data", 'f', 4, 2); break;
    case Storage::F16: check_array(data, "data", 'f', 2, 2); break;
    case Storage::I8: check_array(data, "data", 'i', 1, 2); break;
  }
  v.data = data.data();
  v.n = static_cast<size_t>(data.shape(0));
  v.d = static_cast<size_t>(data.shape(1));
  if (v.d == 0) fail_value("data must have at least one column");
  if (v.storage == Storage::I8) {
    if (scales.is_none()) fail_value("scales are required for i8 storage");
    auto s = scales.cast<py::array>();
    check_array(s, "scales", 'f', 4, 1);
    if (static_cast<size_t>(s.shape(0)) != v.n) fail_value("scales must have one entry per row");
    v.scales = static_cast<const float*>(s.data());
    if (metric == Metric::L2) {
      if (sqnorms.is_none()) fail_value("sqnorms are required for i8 storage with metric 'l2'");
      auto q = sqnorms.cast<py::array>();
      check_array(q, "sqnorms", 'f', 4, 1);
      if (static_cast<size_t>(q.shape(0)) != v.n) fail_value("sqnorms must have one entry per row");
      v.sqnorms = static_cast<const float*>(q.data());
    }
  }
  return v;
}

dense::SearchOptions make_options(size_t k, Metric metric, const py::object& allowed, const py::object& threshold,
                                  int threads, size_t n, const py::object& subset = py::none()) {
  dense::SearchOptions o;
  if (!subset.is_none()) {
    auto a = subset.cast<py::array>();
    if (a.dtype().kind() != 'i' || a.itemsize() != 8) fail_type("subset must have dtype int64, got " + dtype_str(a));
    if (a.ndim() != 1 || !c_contig(a)) fail_value("subset must be a 1-D C-contiguous array");
    const int64_t* s = static_cast<const int64_t*>(a.data());
    const size_t m = static_cast<size_t>(a.shape(0));
    for (size_t i = 0; i < m; ++i) {
      if (s[i] < 0 || static_cast<size_t>(s[i]) >= n || (i && s[i] <= s[i - 1]))
        fail_value("subset must hold strictly increasing rows in [0, " + std::to_string(n) + "), got " +
                   std::to_string(s[i]) + " at position " + std::to_string(i));
    }
    o.subset = s;
    o.subset_n = m;
  }
  o.k = k;
  o.metric = metric;
  o.threads = threads;
  if (threads < 0) fail_value("threads must be >= 0 (0 = automatic), got " + std::to_string(threads));
  if (!allowed.is_none()) {
    auto a = allowed.cast<py::array>();
    check_array(a, "allowed", 'u', 1, 1);
    if (static_cast<size_t>(a.shape(0)) != n)
      fail_value("allowed must have one entry per row (" + std::to_string(n) + "), got " + std::to_string(a.shape(0)));
    o.allowed = static_cast<const uint8_t*>(a.data());
  }
  if (!threshold.is_none()) {
    o.has_threshold = true;
    o.threshold = threshold.cast<float>();
    if (std::isnan(o.threshold)) fail_value("threshold must not be NaN");
  }
  return o;
}

const float* query_ptr(const py::array& q, size_t d, const char* name, int ndim) {
  check_array(q, name, 'f', 4, ndim);
  if (static_cast<size_t>(q.shape(ndim - 1)) != d)
    fail_value(std::string(name) + " has dimension " + std::to_string(q.shape(ndim - 1)) + ", the rows have " +
               std::to_string(d));
  return static_cast<const float*>(q.data());
}

// The IVF lists: centroids, per-list start/length over the row array, optional float32 copies.
dense::IvfView make_ivf(const py::array& centroids, const py::array& starts, const py::array& lens,
                        const RowsView& rows, const py::object& exact) {
  dense::IvfView v;
  v.rows = rows;
  check_array(centroids, "centroids", 'f', 4, 2);
  if (static_cast<size_t>(centroids.shape(1)) != rows.d) fail_value("centroids must have the rows' dimension");
  v.nlist = static_cast<size_t>(centroids.shape(0));
  v.centroids = static_cast<const float*>(centroids.data());
  for (const auto* a : {&starts, &lens}) {
    if (a->dtype().kind() != 'i' || a->itemsize() != 8) fail_type("list starts and lengths must have dtype int64");
    if (a->ndim() != 1 || !c_contig(*a) || static_cast<size_t>(a->shape(0)) != v.nlist)
      fail_value("list starts and lengths must be 1-D C-contiguous with one entry per centroid");
  }
  v.list_start = static_cast<const int64_t*>(starts.data());
  v.list_len = static_cast<const int64_t*>(lens.data());
  for (size_t l = 0; l < v.nlist; ++l) {
    const int64_t s = v.list_start[l], n = v.list_len[l];
    if (s < 0 || n < 0 || static_cast<size_t>(s) > rows.n || static_cast<size_t>(n) > rows.n - static_cast<size_t>(s))
      fail_value("list " + std::to_string(l) + " lies outside the rows");
  }
  if (!exact.is_none()) {
    auto e = exact.cast<py::array>();
    check_array(e, "exact", 'f', 4, 2);
    if (static_cast<size_t>(e.shape(0)) < rows.n || static_cast<size_t>(e.shape(1)) != rows.d)
      fail_value("exact must hold a float32 copy of every row");
    v.exact = static_cast<const float*>(e.data());
  }
  return v;
}

// (rows, scores) of one query: search(rows, scores) fills at most cap entries without the GIL
// and returns how many; the arrays are cut to that.
template <typename Search>
py::tuple top_k_one(size_t cap, Search&& search) {
  py::array_t<int64_t> out_rows(cap);
  py::array_t<float> out_scores(cap);
  int64_t* pr = out_rows.mutable_data();
  float* ps = out_scores.mutable_data();
  size_t cnt;
  {
    py::gil_scoped_release release;
    cnt = search(pr, ps);
  }
  if (cnt < cap) {
    out_rows.resize({static_cast<py::ssize_t>(cnt)});
    out_scores.resize({static_cast<py::ssize_t>(cnt)});
  }
  return py::make_tuple(out_rows, out_scores);
}

// (rows (nq,k), scores (nq,k), counts (nq,)) of a batch: search(rows, scores, counts) fills
// them without the GIL.
template <typename Search>
py::tuple top_k_batch(size_t nq, size_t k, Search&& search) {
  py::array_t<int64_t> out_rows({nq, k});
  py::array_t<float> out_scores({nq, k});
  py::array_t<int64_t> out_counts(nq);
  int64_t* pr = out_rows.mutable_data();
  float* ps = out_scores.mutable_data();
  int64_t* pc = out_counts.mutable_data();
  {
    py::gil_scoped_release release;
    search(pr, ps, pc);
  }
  return py::make_tuple(out_rows, out_scores, out_counts);
}

void bind_ivf_functions(py::module_& m) {
  m.def(
      "ivf_train",
      [](py::array X, size_t nlist, const std::string& metric, int iters, uint64_t seed, int threads) {
        const Metric mt = parse_metric(metric);
        check_array(X, "X", 'f', 4, 2);
        const size_t n = static_cast<size_t>(X.shape(0)), d = static_cast<size_t>(X.shape(1));
        if (d == 0) fail_value("X must have at least one column");
        if (nlist == 0 || nlist > n)
          fail_value("nlist must be in [1, " + std::to_string(n) + "] (the training rows), got " +
                     std::to_string(nlist));
        if (threads < 0) fail_value("threads must be >= 0 (0 = automatic)");
        py::array_t<float> C({nlist, d});
        float* pc = C.mutable_data();
        const float* px = static_cast<const float*>(X.data());
        dense::KmeansResult r;
        {
          py::gil_scoped_release release;
          r = dense::train_kmeans(px, n, d, nlist, mt, iters, seed, threads, pc);
        }
        return py::make_tuple(C, r.imbalance, r.splits);
      },
      py::arg("X"), py::arg("nlist"), py::arg("metric"), py::arg("iters") = 10, py::arg("seed") = 1234,
      py::arg("threads") = 0,
      "k-means centroids of the rows of X (IP: spherical). Returns (centroids (nlist, d), imbalance, splits).");

  m.def(
      "ivf_assign",
      [](py::array X, py::array centroids, const std::string& metric, int threads) {
        const Metric mt = parse_metric(metric);
        check_array(X, "X", 'f', 4, 2);
        check_array(centroids, "centroids", 'f', 4, 2);
        if (X.shape(1) != centroids.shape(1)) fail_value("X and centroids must have the same number of columns");
        if (centroids.shape(0) == 0) fail_value("centroids is empty");
        if (threads < 0) fail_value("threads must be >= 0 (0 = automatic)");
        const size_t n = static_cast<size_t>(X.shape(0)), d = static_cast<size_t>(X.shape(1)),
                     nc = static_cast<size_t>(centroids.shape(0));
        py::array_t<int64_t> out(n);
        int64_t* po = out.mutable_data();
        const float* px = static_cast<const float*>(X.data());
        const float* pc = static_cast<const float*>(centroids.data());
        {
          py::gil_scoped_release release;
          dense::assign_nearest(px, n, d, pc, nc, mt, threads, po);
        }
        return out;
      },
      py::arg("X"), py::arg("centroids"), py::arg("metric"), py::arg("threads") = 0,
      "The nearest centroid of each row of X (IP: largest dot; L2: smallest distance).");

  m.def(
      "ivf_search",
      [](py::array centroids, py::array starts, py::array lens, py::array data, const std::string& storage,
         py::object scales, py::object sqnorms, py::object exact, py::array q, size_t k, size_t nprobe, size_t rerank,
         const std::string& metric, py::object allowed, py::object threshold, int threads) {
        const Metric mt = parse_metric(metric);
        const RowsView rows = make_rows(data, storage, scales, sqnorms, mt);
        const dense::IvfView v = make_ivf(centroids, starts, lens, rows, exact);
        const float* qp = query_ptr(q, rows.d, "q", 1);
        if (nprobe == 0) fail_value("nprobe must be >= 1");
        dense::IvfOptions opt;
        opt.search = make_options(k, mt, allowed, threshold, threads, rows.n);
        opt.nprobe = nprobe;
        opt.rerank = rerank;
        const size_t cap = std::min(k, rows.n);
        return top_k_one(cap, [&](int64_t* pr, float* ps) { return dense::ivf_search_one(v, qp, opt, pr, ps); });
      },
      py::arg("centroids"), py::arg("starts"), py::arg("lens"), py::arg("data"), py::arg("storage"), py::arg("scales"),
      py::arg("sqnorms"), py::arg("exact"), py::arg("q"), py::arg("k"), py::arg("nprobe"), py::arg("rerank"),
      py::arg("metric"), py::arg("allowed") = py::none(), py::arg("threshold") = py::none(), py::arg("threads") = 0,
      "IVF top-k of one float32 query: the nprobe best lists scanned (more while fewer than k admitted rows were "
      "seen), f16/i8 pools of k * rerank re-scored from `exact`. Returns (positions int64, scores float32).");

  m.def(
      "ivf_search_batch",
      [](py::array centroids, py::array starts, py::array lens, py::array data, const std::string& storage,
         py::object scales, py::object sqnorms, py::object exact, py::array Q, size_t k, size_t nprobe, size_t rerank,
         const std::string& metric, py::object allowed, py::object threshold, int threads) {
        const Metric mt = parse_metric(metric);
        const RowsView rows = make_rows(data, storage, scales, sqnorms, mt);
        const dense::IvfView v = make_ivf(centroids, starts, lens, rows, exact);
        const float* qp = query_ptr(Q, rows.d, "Q", 2);
        if (nprobe == 0) fail_value("nprobe must be >= 1");
        const size_t nq = static_cast<size_t>(Q.shape(0));
        dense::IvfOptions opt;
        opt.search = make_options(k, mt, allowed, threshold, threads, rows.n);
        opt.nprobe = nprobe;
        opt.rerank = rerank;
        return top_k_batch(
            nq, k, [&](int64_t* pr, float* ps, int64_t* pc) { dense::ivf_search_batch(v, qp, nq, opt, pr, ps, pc); });
      },
      py::arg("centroids"), py::arg("starts"), py::arg("lens"), py::arg("data"), py::arg("storage"), py::arg("scales"),
      py::arg("sqnorms"), py::arg("exact"), py::arg("Q"), py::arg("k"), py::arg("nprobe"), py::arg("rerank"),
      py::arg("metric"), py::arg("allowed") = py::none(), py::arg("threshold") = py::none(), py::arg("threads") = 0,
      "ivf_search for each row of Q, equal to it bit for bit; the queries are grouped by list so each probed list "
      "is read once per batch (threads split the lists). Returns (positions (nq,k), scores (nq,k), counts (nq,)); "
      "missing entries are -1 / NaN.");
}

}  // namespace

void bind_dense(py::module_& m) {
  m.def(
      "dense_search",
      [](py::array data, const std::string& storage, py::object scales, py::object sqnorms, py::array q, size_t k,
         const std::string& metric, py::object allowed, py::object threshold, int threads, py::object subset) {
        const Metric mt = parse_metric(metric);
        const RowsView rows = make_rows(data, storage, scales, sqnorms, mt);
        const float* qp = query_ptr(q, rows.d, "q", 1);
        const dense::SearchOptions opt = make_options(k, mt, allowed, threshold, threads, rows.n, subset);
        const size_t cap = std::min(k, rows.n);
        return top_k_one(cap, [&](int64_t* pr, float* ps) { return dense::search_one(rows, qp, opt, pr, ps); });
      },
      py::arg("data"), py::arg("storage"), py::arg("scales"), py::arg("sqnorms"), py::arg("q"), py::arg("k"),
      py::arg("metric"), py::arg("allowed") = py::none(), py::arg("threshold") = py::none(), py::arg("threads") = 0,
      py::arg("subset") = py::none(),
      "Exact top-k of one float32 query over stored rows (fused scan + top-k). Returns (rows int64, scores "
      "float32), best first; IP scores descending, L2 squared distances ascending.");

  m.def(
      "dense_search_batch",
      [](py::array data, const std::string& storage, py::object scales, py::object sqnorms, py::array Q, size_t k,
         const std::string& metric, py::object allowed, py::object threshold, int threads, py::object subset) {
        const Metric mt = parse_metric(metric);
        const RowsView rows = make_rows(data, storage, scales, sqnorms, mt);
        const float* qp = query_ptr(Q, rows.d, "Q", 2);
        const size_t nq = static_cast<size_t>(Q.shape(0));
        const dense::SearchOptions opt = make_options(k, mt, allowed, threshold, threads, rows.n, subset);
        return top_k_batch(
            nq, k, [&](int64_t* pr, float* ps, int64_t* pc) { dense::search_batch(rows, qp, nq, opt, pr, ps, pc); });
      },
      py::arg("data"), py::arg("storage"), py::arg("scales"), py::arg("sqnorms"), py::arg("Q"), py::arg("k"),
      py::arg("metric"), py::arg("allowed") = py::none(), py::arg("threshold") = py::none(), py::arg("threads") = 0,
      py::arg("subset") = py::none(),
      "Exact top-k of each row of Q (cache-blocked, threads split the queries). Returns (rows (nq,k), scores "
      "(nq,k), counts (nq,)); missing entries are -1 / NaN.");

  m.def(
      "dense_score_all",
      [](py::array data, const std::string& storage, py::object scales, py::object sqnorms, py::array q,
         const std::string& metric) {
        const Metric mt = parse_metric(metric);
        const RowsView rows = make_rows(data, storage, scales, sqnorms, mt);
        const float* qp = query_ptr(q, rows.d, "q", 1);
        py::array_t<float> out(rows.n);
        float* po = out.mutable_data();
        {
          py::gil_scoped_release release;
          dense::score_all(rows, qp, mt, po);
        }
        return out;
      },
      py::arg("data"), py::arg("storage"), py::arg("scales"), py::arg("sqnorms"), py::arg("q"), py::arg("metric"),
      "Every row's score for one query (IP: inner product; L2: squared distance).");

  m.def(
      "dense_pairwise",
      [](py::array A, py::array B, const std::string& op) {
        check_array(A, "A", 'f', 4, 2);
        check_array(B, "B", 'f', 4, 2);
        if (A.shape(1) != B.shape(1))
          fail_value("A and B must have the same number of columns, got " + std::to_string(A.shape(1)) + " and " +
                     std::to_string(B.shape(1)));
        if (op != "dot" && op != "l2sq") fail_value("op must be 'dot' or 'l2sq', got '" + op + "'");
        const size_t m_ = static_cast<size_t>(A.shape(0)), n = static_cast<size_t>(B.shape(0)),
                     d = static_cast<size_t>(A.shape(1));
        py::array_t<float> out({m_, n});
        float* po = out.mutable_data();
        const float* pa = static_cast<const float*>(A.data());
        const float* pb = static_cast<const float*>(B.data());
        {
          py::gil_scoped_release release;
          const dense::SimilarityKernels& K = dense::similarity_kernels();
          if (d == 0) {
            for (size_t i = 0; i < m_ * n; ++i) po[i] = 0.f;
          } else if (op == "dot") {
            K.dot_tile_f32(pa, m_, pb, n, d, po, n);
          } else {
            for (size_t i = 0; i < m_; ++i) K.l2_rows_f32(pa + i * d, pb, n, d, po + i * n);
          }
        }
        return out;
      },
      py::arg("A"), py::arg("B"), py::arg("op"),
      "Pairwise float32 kernel matrix out[i, j] = op(A[i], B[j]) with op 'dot' or 'l2sq'.");

  m.def(
      "dense_rowwise",
      [](py::array A, py::array B, const std::string& op) {
        check_array(A, "A", 'f', 4, 2);
        check_array(B, "B", 'f', 4, 2);
        if (A.shape(0) != B.shape(0) || A.shape(1) != B.shape(1)) fail_value("A and B must have the same shape");
        if (op != "dot" && op != "l2sq") fail_value("op must be 'dot' or 'l2sq', got '" + op + "'");
        const size_t n = static_cast<size_t>(A.shape(0)), d = static_cast<size_t>(A.shape(1));
        py::array_t<float> out(n);
        float* po = out.mutable_data();
        const float* pa = static_cast<const float*>(A.data());
        const float* pb = static_cast<const float*>(B.data());
        {
          py::gil_scoped_release release;
          const dense::SimilarityKernels& K = dense::similarity_kernels();
          for (size_t i = 0; i < n; ++i)
            po[i] = op == "dot" ? K.dot_f32(pa + i * d, pb + i * d, d) : K.l2sq_f32(pa + i * d, pb + i * d, d);
        }
        return out;
      },
      py::arg("A"), py::arg("B"), py::arg("op"), "Row-wise float32 kernel out[i] = op(A[i], B[i]).");

  m.def(
      "dense_kernel_name", [] { return std::string(dense::similarity_kernels().name); },
      "Name of the similarity kernel table the active SIMD level dispatches to.");

  bind_ivf_functions(m);
}

}  // namespace ragfind::bindings
