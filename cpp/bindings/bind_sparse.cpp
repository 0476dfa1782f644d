// Bindings for the learned-sparse (SPLADE) impact index (issue 6).
// Inputs are validated with the GIL held; queries run with it released under a shared lock
// (add/install take it exclusively), so searches from many Python threads run in parallel.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "bindings.hpp"
#include "ragfind/splade/impact_index.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

using sparse::Algorithm;
using sparse::ImpactIndex;
using postings::WeightedTerm;

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::Auto;
  if (name == "maxscore") return Algorithm::MaxScore;
  if (name == "exhaustive") return Algorithm::Exhaustive;
  if (name == "taat") return Algorithm::TaatMaxScore;
  throw py::value_error("algorithm='" + name + "': expected 'auto', 'maxscore', 'taat' or 'exhaustive'");
}

using I64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
using U32 = py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>;
using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Checks one CSR batch: indptr monotone from 0 to nnz, indices < dim and strictly increasing
// per row, values finite and >= 0. `what` names the argument ("documents", "query").
void check_csr(const I64& indptr, const py::array& indices_raw, const U32& indices, const F32& values,
               std::uint32_t dim, const char* what) {
  const std::string w(what);
  if (indptr.ndim() != 1 || indptr.shape(0) < 1) throw py::value_error(w + ": indptr must be 1-D with rows + 1 entries");
  if (indices.ndim() != 1 || values.ndim() != 1 || indices.shape(0) != values.shape(0))
    throw py::value_error(w + ": indices and values must be 1-D arrays of the same length");
  if (indices_raw.dtype().kind() != 'i' && indices_raw.dtype().kind() != 'u')
    throw py::type_error(w + ": indices must be integers, got dtype " + std::string(py::str(indices_raw.dtype())));
  const std::int64_t* p = indptr.data();
  const std::int64_t rows = indptr.shape(0) - 1;
  const std::int64_t nnz = indices.shape(0);
  if (p[0] != 0 || p[rows] != nnz)
    throw py::value_error(w + ": indptr must start at 0 and end at len(indices)=" + std::to_string(nnz));
  // Negative input indices wrapped to huge uint32 values are caught by the range test.
  if (indices_raw.dtype().kind() == 'i') {
    py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> signed_idx(indices_raw);
    for (std::int64_t j = 0; j < nnz; ++j)
      if (signed_idx.data()[j] < 0 || signed_idx.data()[j] >= dim)
        throw py::value_error(w + ": term id " + std::to_string(signed_idx.data()[j]) + " at position " +
                              std::to_string(j) + " is outside the vocabulary [0, " + std::to_string(dim) + ")");
  }
  const std::uint32_t* ix = indices.data();
  const float* v = values.data();
  for (std::int64_t r = 0; r < rows; ++r) {
    if (p[r + 1] < p[r]) throw py::value_error(w + ": indptr decreases at row " + std::to_string(r));
    for (std::int64_t j = p[r]; j < p[r + 1]; ++j) {
      if (ix[j] >= dim)
        throw py::value_error(w + ": row " + std::to_string(r) + " has term id " + std::to_string(ix[j]) +
                              " outside the vocabulary [0, " + std::to_string(dim) + ")");
      if (j > p[r] && ix[j] <= ix[j - 1])
        throw py::value_error(w + ": row " + std::to_string(r) +
                              " has term ids that are not strictly increasing (sort them, merge duplicates)");
      if (!std::isfinite(v[j]) || v[j] < 0.0f)
        throw py::value_error(w + ": row " + std::to_string(r) + " has weight " + std::to_string(v[j]) +
                              " for term " + std::to_string(ix[j]) + " (expected finite and >= 0)");
    }
  }
}

struct PyImpactIndex {
  ImpactIndex index;
  mutable std::shared_mutex mu;
  PyImpactIndex(std::uint32_t dim, float scale) : index(dim, scale) {}
};

std::vector<WeightedTerm> to_query(const std::uint32_t* ix, const float* v, std::int64_t a, std::int64_t b) {
  std::vector<WeightedTerm> q;
  q.reserve(static_cast<std::size_t>(b - a));
  for (std::int64_t j = a; j < b; ++j)
    if (v[j] > 0.0f) q.push_back({ix[j], v[j]});
  return q;
}

}  // namespace

void bind_sparse(py::module_& m) {
  py::class_<PyImpactIndex>(m, "SparseImpactIndex",
                            "Inverted index of quantised SPLADE impacts (see ragfind.SparseVectorIndex).")
      .def(py::init([](std::int64_t dim, float scale) {
             if (dim <= 0 || dim > 0xFFFFFFF0ll) throw py::value_error("dim must be in [1, 2^32), got " + std::to_string(dim));
             if (!(scale >= 0.0f) || !std::isfinite(scale))
               throw py::value_error("scale must be finite and >= 0 (0: exact float32), got " + std::to_string(scale));
             return new PyImpactIndex(static_cast<std::uint32_t>(dim), scale);
           }),
           py::arg("dim"), py::arg("scale"))
      .def_property_readonly("dim", [](const PyImpactIndex& s) { return s.index.dim(); })
      .def_property_readonly("scale", [](const PyImpactIndex& s) { return s.index.scale(); })
      .def_property_readonly("num_docs", [](const PyImpactIndex& s) {
        std::shared_lock lk(s.mu);
        return s.index.num_docs();
      })
      .def_property_readonly("dense_column_bytes", [](const PyImpactIndex& s) {
        std::shared_lock lk(s.mu);
        return s.index.dense_column_bytes();
      })
      .def_property_readonly("num_dense_columns", [](const PyImpactIndex& s) {
        std::shared_lock lk(s.mu);
        return s.index.num_dense_columns();
      })
      .def_property_readonly("num_postings", [](const PyImpactIndex& s) {
        std::shared_lock lk(s.mu);
        return s.index.num_postings();
      })
      .def_property_readonly("num_segments", [](const PyImpactIndex& s) {
        std::shared_lock lk(s.mu);
        return s.index.num_segments();
      })
      .def("add", [](PyImpactIndex& s, const I64& indptr, const py::array& indices_raw, const F32& values) {
        U32 indices(indices_raw);
        check_csr(indptr, indices_raw, indices, values, s.index.dim(), "documents");
        py::gil_scoped_release release;
        std::unique_lock lk(s.mu);
        s.index.add(indptr.data(), indices.data(), values.data(), static_cast<std::size_t>(indptr.shape(0) - 1));
      }, py::arg("indptr"), py::arg("indices"), py::arg("values"))
      .def("search_batch", [](const PyImpactIndex& s, const I64& indptr, const py::array& indices_raw, const F32& values,
                              std::int64_t k, int n_threads, const std::string& algorithm) {
        U32 indices(indices_raw);
        check_csr(indptr, indices_raw, indices, values, s.index.dim(), "queries");
        if (k <= 0) throw py::value_error("k must be positive, got " + std::to_string(k));
        const Algorithm alg = parse_algorithm(algorithm);
        const std::int64_t nq = indptr.shape(0) - 1;
        py::array_t<std::int64_t> ids({nq, k});
        py::array_t<float> scores({nq, k});
        std::int64_t* io = ids.mutable_data();
        float* so = scores.mutable_data();
        const std::int64_t* p = indptr.data();
        const std::uint32_t* ix = indices.data();
        const float* v = values.data();
        {
          py::gil_scoped_release release;
          std::shared_lock lk(s.mu);
          int hw = static_cast<int>(std::thread::hardware_concurrency());
          int threads = n_threads > 0 ? n_threads : std::max(1, hw);
          threads = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, nq / 4)));
          std::atomic<std::int64_t> next{0};
          auto worker = [&] {
            std::vector<bm25::ScoredDoc> out;
            for (std::int64_t qi; (qi = next.fetch_add(1)) < nq;) {
              s.index.search(to_query(ix, v, p[qi], p[qi + 1]), static_cast<std::size_t>(k), out, alg);
              for (std::int64_t r = 0; r < k; ++r) {
                const bool have = r < static_cast<std::int64_t>(out.size());
                io[qi * k + r] = have ? static_cast<std::int64_t>(out[r].doc) : -1;
                so[qi * k + r] = have ? out[r].score : -std::numeric_limits<float>::infinity();
              }
            }
          };
          std::vector<std::thread> pool;
          for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
          worker();
          for (auto& th : pool) th.join();
        }
        return py::make_tuple(ids, scores);
      }, py::arg("indptr"), py::arg("indices"), py::arg("values"), py::arg("k"), py::arg("n_threads") = 0,
         py::arg("algorithm") = "auto",
         "Top-k per query row: (ids int64 (nq, k), scores float32 (nq, k)); missing entries are -1 / -inf.")
      .def("score_all", [](const PyImpactIndex& s, const py::array& indices_raw, const F32& values) {
        U32 indices(indices_raw);
        I64 indptr(py::array_t<std::int64_t>(std::vector<py::ssize_t>{2}));
        indptr.mutable_data()[0] = 0;
        indptr.mutable_data()[1] = indices.ndim() == 1 ? indices.shape(0) : 0;
        check_csr(indptr, indices_raw, indices, values, s.index.dim(), "query");
        std::shared_lock lk(s.mu);
        py::array_t<float> out(static_cast<py::ssize_t>(s.index.num_docs()));
        float* o = out.mutable_data();
        auto q = to_query(indices.data(), values.data(), 0, indices.shape(0));
        py::gil_scoped_release release;
        s.index.score_all(q, o);
        return out;
      }, py::arg("indices"), py::arg("values"), "Dot product with every document (decoded impacts), float32.")
      .def("weights", [](const PyImpactIndex& s, const U32& terms, std::int64_t doc) {
        std::shared_lock lk(s.mu);
        if (doc < 0 || doc >= s.index.num_docs())
          throw py::index_error("doc " + std::to_string(doc) + " out of range for " + std::to_string(s.index.num_docs()) + " documents");
        py::array_t<float> out(terms.shape(0));
        for (py::ssize_t i = 0; i < terms.shape(0); ++i)
          out.mutable_data()[i] = s.index.weight(terms.data()[i], static_cast<std::uint32_t>(doc));
        return out;
      }, py::arg("terms"), py::arg("doc"), "Decoded weights of `terms` in document `doc` (0 where absent).")
      .def("export_arrays", [](const PyImpactIndex& s) {
        std::vector<std::uint64_t> off;
        std::vector<std::uint32_t> docs, stored;
        {
          std::shared_lock lk(s.mu);
          py::gil_scoped_release release;
          s.index.export_arrays(off, docs, stored);
        }
        return py::make_tuple(py::array_t<std::uint64_t>(off.size(), off.data()),
                              py::array_t<std::uint32_t>(docs.size(), docs.data()),
                              py::array_t<std::uint32_t>(stored.size(), stored.data()));
      }, "(term offsets uint64 (dim + 1), doc ids uint32, stored impacts uint32) of the whole index.")
      .def("install", [](PyImpactIndex& s, std::int64_t num_docs,
                         const py::array_t<std::uint64_t, py::array::c_style>& offsets,
                         const py::array_t<std::uint32_t, py::array::c_style>& docs,
                         const py::array_t<std::uint32_t, py::array::c_style>& stored) {
        const std::uint32_t dim = s.index.dim();
        if (num_docs < 0 || num_docs > 0xFFFFFFF0ll) throw py::value_error("num_docs out of range");
        if (offsets.ndim() != 1 || offsets.shape(0) != static_cast<py::ssize_t>(dim) + 1)
          throw py::value_error("offsets must have dim + 1 = " + std::to_string(dim + 1) + " entries");
        if (docs.ndim() != 1 || stored.ndim() != 1 || docs.shape(0) != stored.shape(0))
          throw py::value_error("docs and stored must be 1-D arrays of the same length");
        const std::uint64_t* o = offsets.data();
        const std::uint32_t* d = docs.data();
        const std::uint32_t* st = stored.data();
        const std::uint64_t n = static_cast<std::uint64_t>(docs.shape(0));
        if (o[0] != 0 || o[dim] != n) throw py::value_error("corrupt postings: offsets do not span the postings");
        const bool quantised = s.index.scale() > 0.0f;
        for (std::uint32_t t = 0; t < dim; ++t) {
          if (o[t + 1] < o[t] || o[t + 1] > n) throw py::value_error("corrupt postings: offsets decrease at term " + std::to_string(t));
          for (std::uint64_t i = o[t]; i < o[t + 1]; ++i) {
            if (d[i] >= static_cast<std::uint64_t>(num_docs) || (i > o[t] && d[i] <= d[i - 1]))
              throw py::value_error("corrupt postings: doc ids of term " + std::to_string(t) + " out of range or unsorted");
            float f;
            std::memcpy(&f, &st[i], 4);
            if (quantised ? st[i] == 0 : !(std::isfinite(f) && f > 0.0f))
              throw py::value_error("corrupt postings: invalid stored weight for term " + std::to_string(t));
          }
        }
        auto* holder = new py::object(py::make_tuple(offsets, docs, stored));
        std::shared_ptr<const void> keep(holder, [](const void* p) {
          py::gil_scoped_acquire gil;
          delete static_cast<const py::object*>(p);
        });
        std::unique_lock lk(s.mu);
        s.index.install(static_cast<std::uint32_t>(num_docs), o, d, st, n, std::move(keep));
      }, py::arg("num_docs"), py::arg("offsets"), py::arg("docs"), py::arg("stored"),
         "Replace the contents with one segment borrowing these (validated) arrays.");
}

}  // namespace ragfind::bindings
