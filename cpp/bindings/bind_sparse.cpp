// Bindings for the learned-sparse (SPLADE) impact index (splade::Store, which holds the lock).
// Inputs are validated with the GIL held; every call into the store releases the GIL first (the
// store may wait for its lock, and a lock holder may wait for the GIL), and numpy arrays are made
// from the store's buffers after it returns. Searches from many Python threads run in parallel.
// The Python class keeps the ids; here documents are internal numbers 0 .. num_docs - 1.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "ragfind/splade/store.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

using splade::Algorithm;
using splade::Store;
using inverted::WeightedTerm;

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::Auto;
  if (name == "maxscore") return Algorithm::MaxScore;
  if (name == "exhaustive") return Algorithm::Exhaustive;
  if (name == "taat") return Algorithm::TaatMaxScore;
  throw py::value_error("algorithm='" + name + "': expected 'auto', 'maxscore', 'taat' or 'exhaustive'");
}

using I64Cast = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
using U32Cast = py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>;
using F32Cast = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Checks one CSR batch: indptr monotone from 0 to nnz, indices < dim and strictly increasing
// per row, values finite and >= 0. `what` names the argument ("documents", "query").
void check_csr(const I64Cast& indptr, const py::array& indices_raw, const U32Cast& indices, const F32Cast& values,
               std::uint32_t dim, const char* what) {
  const std::string w(what);
  if (indptr.ndim() != 1 || indptr.shape(0) < 1)
    throw py::value_error(w + ": indptr must be 1-D with rows + 1 entries");
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
        throw py::value_error(w + ": row " + std::to_string(r) + " has weight " + std::to_string(v[j]) + " for term " +
                              std::to_string(ix[j]) + " (expected finite and >= 0)");
    }
  }
}

// A numpy array that takes over v's buffer (no copy): 1-D, or of `shape` (v.size() entries).
template <class T>
py::array_t<T> to_numpy(std::vector<T>&& v, std::vector<py::ssize_t> shape = {}) {
  auto* owner = new std::vector<T>(std::move(v));
  py::capsule free_owner(owner, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  if (shape.empty()) shape.push_back(static_cast<py::ssize_t>(owner->size()));
  return py::array_t<T>(std::move(shape), owner->data(), free_owner);
}

// The store's sizes, read with the GIL released.
splade::StoreStats stats_of(const Store& s) {
  py::gil_scoped_release release;
  return s.stats();
}

// Owner of borrowed numpy arrays for the store; dropping it takes the GIL.
std::shared_ptr<const void> keep_alive(py::object arrays) {
  auto* holder = new py::object(std::move(arrays));
  return std::shared_ptr<const void>(holder, [](const void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<const py::object*>(p);
  });
}

}  // namespace

void bind_sparse(py::module_& m) {
  py::class_<Store>(m, "SparseImpactIndex",
                    "Inverted index of quantised SPLADE impacts (see ragfind.SparseVectorIndex).")
      .def(py::init([](std::int64_t dim, float scale, bool exact) {
             if (dim <= 0 || dim > 0xFFFFFFF0ll)
               throw py::value_error("dim must be in [1, 2^32), got " + std::to_string(dim));
             if (!(scale >= 0.0f) || !std::isfinite(scale))
               throw py::value_error("scale must be finite and >= 0 (0: exact float32), got " + std::to_string(scale));
             return new Store(static_cast<std::uint32_t>(dim), scale, exact);
           }),
           py::arg("dim"), py::arg("scale"), py::arg("exact") = false)
      .def_property_readonly(
          "exact", [](const Store& s) { return stats_of(s).exact; },
          "True when searches re-score with the stored float vectors (exact float top-k).")
      .def_property_readonly(
          "forward_bytes", [](const Store& s) { return stats_of(s).forward_bytes; },
          "Bytes of the float vector store used for exact re-scoring.")
      .def_property_readonly("dim", [](const Store& s) { return s.dim(); })
      .def_property_readonly("scale", [](const Store& s) { return s.scale(); })
      .def_property_readonly(
          "num_docs", [](const Store& s) { return stats_of(s).num_docs; },
          "Internal document numbers handed out (deleted documents included).")
      .def_property_readonly("num_live", [](const Store& s) { return stats_of(s).num_live; })
      .def_property_readonly(
          "generation", [](const Store& s) { return stats_of(s).generation; },
          "Write counter: an allowed-set is valid for the generation it was compiled at.")
      .def_property_readonly("dense_column_bytes", [](const Store& s) { return stats_of(s).dense_column_bytes; })
      .def_property_readonly("num_dense_columns", [](const Store& s) { return stats_of(s).num_dense_columns; })
      .def_property_readonly("num_postings", [](const Store& s) { return stats_of(s).num_postings; })
      .def_property_readonly("num_segments", [](const Store& s) { return stats_of(s).num_segments; })
      .def(
          "add",
          [](Store& s, const I64Cast& indptr, const py::array& indices_raw, const F32Cast& values) {
            U32Cast indices(indices_raw);
            check_csr(indptr, indices_raw, indices, values, s.dim(), "documents");
            py::gil_scoped_release release;
            s.add(indptr.data(), indices.data(), values.data(), static_cast<std::size_t>(indptr.shape(0) - 1));
          },
          py::arg("indptr"), py::arg("indices"), py::arg("values"))
      .def(
          "remove",
          [](Store& s, const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& docs) {
            if (docs.ndim() != 1) throw py::value_error("docs must be a 1-D array of internal document numbers");
            std::vector<std::int64_t> d(docs.data(), docs.data() + docs.shape(0));
            py::gil_scoped_release release;
            s.remove(std::move(d));  // std::invalid_argument (ValueError) names a bad document
          },
          py::arg("docs"), "Deletes documents by internal number (tombstones); all or nothing.")
      .def(
          "search_batch",
          [](const Store& s, const I64Cast& indptr, const py::array& indices_raw, const F32Cast& values, std::int64_t k,
             int n_threads, const std::string& algorithm, const py::object& allowed_obj, std::int64_t generation,
             std::int64_t query_cut) -> py::object {
            U32Cast indices(indices_raw);
            check_csr(indptr, indices_raw, indices, values, s.dim(), "queries");
            if (k <= 0) throw py::value_error("k must be positive, got " + std::to_string(k));
            if (query_cut < 0 || query_cut > 0xFFFFFFFFll)
              throw py::value_error("query_cut must be >= 0 (0: exact), got " + std::to_string(query_cut));
            const Algorithm alg = parse_algorithm(algorithm);
            py::array_t<std::uint8_t, py::array::c_style> allowed;  // (a default array_t is not null)
            const bool masked = !allowed_obj.is_none();
            if (masked) {
              allowed = py::array_t<std::uint8_t, py::array::c_style>::ensure(allowed_obj);
              if (!allowed || allowed.ndim() != 1) throw py::value_error("allowed must be a 1-D uint8 mask");
            }
            const std::int64_t nq = indptr.shape(0) - 1;
            splade::BatchHits hits;
            bool fresh;
            {
              py::gil_scoped_release release;
              fresh = s.search_batch(indptr.data(), indices.data(), values.data(), static_cast<std::size_t>(nq),
                                     static_cast<std::size_t>(k), n_threads, alg, masked ? allowed.data() : nullptr,
                                     masked ? static_cast<std::size_t>(allowed.shape(0)) : 0, generation,
                                     static_cast<std::uint32_t>(query_cut), hits);
            }
            if (!fresh) return py::none();  // compiled for an earlier state: the caller compiles it again
            const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(nq), static_cast<py::ssize_t>(hits.k)};
            return py::make_tuple(to_numpy(std::move(hits.docs), shape), to_numpy(std::move(hits.scores), shape));
          },
          py::arg("indptr"), py::arg("indices"), py::arg("values"), py::arg("k"), py::arg("n_threads") = 0,
          py::arg("algorithm") = "auto", py::arg("allowed") = py::none(), py::arg("generation") = -1,
          py::arg("query_cut") = 0,
          "Top-min(k, live docs) per query row: (internal docs int64 (nq, k'), scores float32 (nq, k')); missing "
          "entries are -1 / -inf. `allowed`: a uint8 mask over the internal documents compiled at `generation` "
          "(None when the index changed since: compile it again). query_cut > 0: approximate, candidates from the "
          "query's query_cut largest weights.")
      .def(
          "score_all",
          [](const Store& s, const py::array& indices_raw, const F32Cast& values) {
            U32Cast indices(indices_raw);
            I64Cast indptr(py::array_t<std::int64_t>(std::vector<py::ssize_t>{2}));
            indptr.mutable_data()[0] = 0;
            indptr.mutable_data()[1] = indices.ndim() == 1 ? indices.shape(0) : 0;
            check_csr(indptr, indices_raw, indices, values, s.dim(), "query");
            std::vector<WeightedTerm> q;
            for (py::ssize_t j = 0; j < indices.shape(0); ++j)
              if (values.data()[j] > 0.0f) q.push_back({indices.data()[j], values.data()[j]});
            std::vector<float> out;
            {
              py::gil_scoped_release release;
              out = s.score_all(q);
            }
            return to_numpy(std::move(out));
          },
          py::arg("indices"), py::arg("values"), "Dot product with every document (decoded impacts), float32.")
      .def(
          "weights",
          [](const Store& s, const U32Cast& terms, std::int64_t doc) {
            std::vector<float> out;
            {
              py::gil_scoped_release release;  // std::out_of_range (IndexError) for a bad doc
              out = s.weights(terms.data(), static_cast<std::size_t>(terms.shape(0)), doc);
            }
            return to_numpy(std::move(out));
          },
          py::arg("terms"), py::arg("doc"), "Decoded weights of `terms` in document `doc` (0 where absent).")
      .def(
          "export_arrays",
          [](const Store& s) {
            std::vector<std::uint64_t> off;
            std::vector<std::uint32_t> docs, stored;
            {
              py::gil_scoped_release release;
              s.export_arrays(off, docs, stored);
            }
            return py::make_tuple(to_numpy(std::move(off)), to_numpy(std::move(docs)), to_numpy(std::move(stored)));
          },
          "(term offsets uint64 (dim + 1), doc ids uint32, stored impacts uint32) of the whole index.")
      .def(
          "install",
          [](Store& s, std::int64_t num_docs, const py::array_t<std::uint64_t, py::array::c_style>& offsets,
             const py::array_t<std::uint32_t, py::array::c_style>& docs,
             const py::array_t<std::uint32_t, py::array::c_style>& stored) {
            const std::uint32_t dim = s.dim();
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
            const bool quantised = s.scale() > 0.0f;
            for (std::uint32_t t = 0; t < dim; ++t) {
              if (o[t + 1] < o[t] || o[t + 1] > n)
                throw py::value_error("corrupt postings: offsets decrease at term " + std::to_string(t));
              for (std::uint64_t i = o[t]; i < o[t + 1]; ++i) {
                if (d[i] >= static_cast<std::uint64_t>(num_docs) || (i > o[t] && d[i] <= d[i - 1]))
                  throw py::value_error("corrupt postings: doc ids of term " + std::to_string(t) +
                                        " out of range or unsorted");
                float f;
                std::memcpy(&f, &st[i], 4);
                if (quantised ? st[i] == 0 : !(std::isfinite(f) && f > 0.0f))
                  throw py::value_error("corrupt postings: invalid stored weight for term " + std::to_string(t));
              }
            }
            std::shared_ptr<const void> keep = keep_alive(py::make_tuple(offsets, docs, stored));
            py::gil_scoped_release release;
            s.install(static_cast<std::uint32_t>(num_docs), o, d, st, n, std::move(keep));
          },
          py::arg("num_docs"), py::arg("offsets"), py::arg("docs"), py::arg("stored"),
          "Replace the contents with one segment borrowing these (validated) arrays.")
      .def(
          "export_forward",
          [](const Store& s) {
            std::vector<std::uint64_t> indptr;
            std::vector<std::uint32_t> terms;
            std::vector<float> values;
            {
              py::gil_scoped_release release;
              s.export_forward(indptr, terms, values);
            }
            return py::make_tuple(to_numpy(std::move(indptr)), to_numpy(std::move(terms)), to_numpy(std::move(values)));
          },
          "(row offsets uint64 (live docs + 1), terms uint32, float32 weights) of the live documents' float vectors.")
      .def(
          "install_forward",
          [](Store& s, const py::array_t<std::uint64_t, py::array::c_style>& indptr,
             const py::array_t<std::uint32_t, py::array::c_style>& terms,
             const py::array_t<float, py::array::c_style>& values) {
            if (!(s.scale() > 0.0f)) throw py::value_error("install_forward: the index stores float weights");
            const std::uint32_t dim = s.dim();
            // The store checks the length again under its lock (a write may come in between).
            const std::uint64_t nd = stats_of(s).num_docs;
            if (indptr.ndim() != 1 || static_cast<std::uint64_t>(indptr.shape(0)) != nd + 1)
              throw py::value_error("forward offsets must have num_docs + 1 = " + std::to_string(nd + 1) + " entries");
            if (terms.ndim() != 1 || values.ndim() != 1 || terms.shape(0) != values.shape(0))
              throw py::value_error("forward terms and values must be 1-D arrays of the same length");
            const std::uint64_t* o = indptr.data();
            const std::uint32_t* t = terms.data();
            const float* v = values.data();
            const std::uint64_t n = static_cast<std::uint64_t>(terms.shape(0));
            if (o[0] != 0 || o[nd] != n) throw py::value_error("corrupt vectors: offsets do not span the weights");
            for (std::uint64_t d = 0; d < nd; ++d) {
              if (o[d + 1] < o[d] || o[d + 1] > n)
                throw py::value_error("corrupt vectors: offsets decrease at document " + std::to_string(d));
              for (std::uint64_t i = o[d]; i < o[d + 1]; ++i)
                if (t[i] >= dim || (i > o[d] && t[i] <= t[i - 1]) || !(std::isfinite(v[i]) && v[i] > 0.0f))
                  throw py::value_error("corrupt vectors: document " + std::to_string(d) +
                                        " has a term out of range, unsorted, or an invalid weight");
            }
            std::shared_ptr<const void> keep = keep_alive(py::make_tuple(indptr, terms, values));
            py::gil_scoped_release release;
            s.install_forward(o, static_cast<std::size_t>(indptr.shape(0)), t, v, n, std::move(keep));
          },
          py::arg("indptr"), py::arg("terms"), py::arg("values"),
          "After install: borrow the documents' float vectors (validated) and re-score exactly.");
}

}  // namespace ragfind::bindings
