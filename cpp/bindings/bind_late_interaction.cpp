// Bindings for the MaxSim and the late-interaction index.
// Inputs are validated with the GIL held; the scoring runs with it released.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "ragfind/late/maxsim.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

using late::TokenDType;

std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// A C-contiguous 2-D float32/float16 matrix with `dim` columns (dim < 0: any).
TokenDType check_matrix(const py::array& a, const char* name, int64_t dim, bool allow_f16) {
  const bool is_f32 = a.dtype().equal(py::dtype::of<float>());
  const bool is_f16 = a.dtype().equal(py::dtype("float16"));
  if (!is_f32 && !(allow_f16 && is_f16))
    throw py::type_error(std::string(name) + " must be a float32" + (allow_f16 ? " or float16" : "") +
                         " array, got dtype " + std::string(py::str(a.dtype())));
  if (a.ndim() != 2) throw py::value_error(std::string(name) + " must be 2-D (tokens, dim), got shape " + shape_str(a));
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(name) + " must be C-contiguous (use numpy.ascontiguousarray)");
  if (dim >= 0 && a.shape(1) != dim)
    throw py::value_error(std::string(name) + " has dim " + std::to_string(a.shape(1)) + ", expected " +
                          std::to_string(dim) + " (the query's dim)");
  return is_f32 ? TokenDType::F32 : TokenDType::F16;
}

void check_finite(const py::array& a, const char* name, TokenDType dt) {
  int64_t bad;
  {
    py::gil_scoped_release release;
    bad = late::first_non_finite(a.data(), static_cast<int64_t>(a.size()), dt);
  }
  if (bad >= 0) {
    const int64_t cols = a.ndim() == 2 ? a.shape(1) : 1;
    throw py::value_error(std::string(name) + " contains a non-finite value (NaN or Inf) at row " +
                          std::to_string(bad / cols) + ", column " + std::to_string(bad % cols));
  }
}

py::array_t<float> maxsim_list(const py::array& query, const py::list& docs, int n_threads, bool finite_check) {
  check_matrix(query, "query_vectors", -1, false);
  if (query.shape(0) == 0) throw py::value_error("query_vectors has no token vectors (shape " + shape_str(query) + ")");
  if (finite_check) check_finite(query, "query_vectors", TokenDType::F32);
  const int64_t dim = query.shape(1);
  const size_t n = docs.size();
  std::vector<py::array> keep;
  keep.reserve(n);
  std::vector<const void*> ptrs(n);
  std::vector<int64_t> lens(n);
  int dtype_seen = -1;
  for (size_t i = 0; i < n; ++i) {
    py::object item = docs[i];
    if (!py::isinstance<py::array>(item))
      throw py::type_error("documents[" + std::to_string(i) + "] must be a numpy array, got " +
                           std::string(py::str(py::type::handle_of(item).attr("__name__"))));
    py::array a = py::reinterpret_borrow<py::array>(item);
    const std::string name = "documents[" + std::to_string(i) + "]";
    TokenDType dt = check_matrix(a, name.c_str(), dim, true);
    if (dtype_seen >= 0 && static_cast<int>(dt) != dtype_seen)
      throw py::type_error("documents mix float32 and float16 arrays (documents[" + std::to_string(i) +
                           "]); use one dtype");
    dtype_seen = static_cast<int>(dt);
    if (a.shape(0) == 0)
      throw py::value_error(name + " is empty (shape " + shape_str(a) + "); MaxSim needs at least one token vector");
    ptrs[i] = a.data();
    lens[i] = a.shape(0);
    keep.push_back(std::move(a));
  }
  py::array_t<float> out(static_cast<py::ssize_t>(n));
  const float* q = static_cast<const float*>(query.data());
  float* o = out.mutable_data();
  const int64_t m = query.shape(0);
  const TokenDType dt = dtype_seen == 1 ? TokenDType::F16 : TokenDType::F32;
  late::NonFinite bad;
  {
    py::gil_scoped_release release;
    bad = late::maxsim_batch(q, m, dim, ptrs.data(), lens.data(), static_cast<int64_t>(n), dt, o, n_threads,
                             finite_check);
  }
  if (bad.doc >= 0)
    throw py::value_error("documents[" + std::to_string(bad.doc) +
                          "] contains a non-finite value (NaN or Inf) at row " + std::to_string(bad.position / dim) +
                          ", column " + std::to_string(bad.position % dim));
  return out;
}

// Documents packed contiguously: tokens (total, dim) and offsets (n_docs + 1), doc d owning
// rows offsets[d]:offsets[d+1]. doc_ids (optional) selects and orders the documents scored.
py::array_t<float> maxsim_packed(const py::array& query, const py::array& tokens,
                                 const py::array_t<int64_t, py::array::c_style>& offsets, const py::object& doc_ids_obj,
                                 int n_threads, bool finite_check) {
  check_matrix(query, "query_vectors", -1, false);
  if (query.shape(0) == 0) throw py::value_error("query_vectors has no token vectors (shape " + shape_str(query) + ")");
  const int64_t dim = query.shape(1);
  const TokenDType dt = check_matrix(tokens, "tokens", dim, true);
  if (offsets.ndim() != 1 || offsets.shape(0) < 1)
    throw py::value_error("offsets must be 1-D with n_documents + 1 entries, got shape " + shape_str(offsets));
  const int64_t n_docs = offsets.shape(0) - 1;
  const int64_t* off = offsets.data();
  if (off[0] != 0) throw py::value_error("offsets[0] must be 0, got " + std::to_string(off[0]));
  for (int64_t d = 0; d < n_docs; ++d) {
    if (off[d + 1] <= off[d])
      throw py::value_error("offsets must be strictly increasing (documents cannot be empty): offsets[" +
                            std::to_string(d) + "]=" + std::to_string(off[d]) + ", offsets[" + std::to_string(d + 1) +
                            "]=" + std::to_string(off[d + 1]));
  }
  if (off[n_docs] != tokens.shape(0))
    throw py::value_error("offsets[-1]=" + std::to_string(off[n_docs]) + " does not match tokens rows " +
                          std::to_string(tokens.shape(0)));
  if (finite_check) check_finite(query, "query_vectors", TokenDType::F32);
  std::vector<int64_t> ids;
  if (doc_ids_obj.is_none()) {
    ids.resize(n_docs);
    for (int64_t d = 0; d < n_docs; ++d) ids[d] = d;
  } else {
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> doc_ids =
        py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(doc_ids_obj);
    if (!doc_ids || doc_ids.ndim() != 1) throw py::value_error("doc_ids must be a 1-D integer array");
    ids.assign(doc_ids.data(), doc_ids.data() + doc_ids.shape(0));
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= n_docs)
        throw py::index_error("doc_ids[" + std::to_string(i) + "]=" + std::to_string(ids[i]) + " is out of range for " +
                              std::to_string(n_docs) + " documents");
  }
  const size_t esize = dt == TokenDType::F32 ? 4 : 2;
  const char* base = static_cast<const char*>(tokens.data());
  std::vector<const void*> ptrs(ids.size());
  std::vector<int64_t> lens(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ptrs[i] = base + static_cast<size_t>(off[ids[i]]) * static_cast<size_t>(dim) * esize;
    lens[i] = off[ids[i] + 1] - off[ids[i]];
  }
  py::array_t<float> out(static_cast<py::ssize_t>(ids.size()));
  const float* q = static_cast<const float*>(query.data());
  float* o = out.mutable_data();
  const int64_t m = query.shape(0);
  late::NonFinite bad;
  {
    py::gil_scoped_release release;
    bad = late::maxsim_batch(q, m, dim, ptrs.data(), lens.data(), static_cast<int64_t>(ids.size()), dt, o, n_threads,
                             finite_check);
  }
  if (bad.doc >= 0) {
    const int64_t row = off[ids[bad.doc]] + bad.position / dim;
    throw py::value_error("tokens contains a non-finite value (NaN or Inf) at row " + std::to_string(row) +
                          ", column " + std::to_string(bad.position % dim) + " (document " +
                          std::to_string(ids[bad.doc]) + ")");
  }
  return out;
}

py::tuple maxsim_explain(const py::array& query, const py::array& doc) {
  check_matrix(query, "query_vectors", -1, false);
  const TokenDType dt = check_matrix(doc, "document", query.shape(1), true);
  if (query.shape(0) == 0) throw py::value_error("query_vectors has no token vectors");
  if (doc.shape(0) == 0) throw py::value_error("document is empty; MaxSim needs at least one token vector");
  const int64_t m = query.shape(0);
  py::array_t<int64_t> best(m);
  py::array_t<float> sims(m);
  int64_t* b = best.mutable_data();
  float* s = sims.mutable_data();
  {
    py::gil_scoped_release release;
    late::maxsim_explain(static_cast<const float*>(query.data()), m, query.shape(1), doc.data(), doc.shape(0), dt, b,
                         s);
  }
  return py::make_tuple(best, sims);
}

}  // namespace

void bind_late_interaction(py::module_& m) {
  m.def("maxsim_list", &maxsim_list, py::arg("query_vectors"), py::arg("documents"), py::arg("n_threads") = 0,
        py::arg("check_finite") = true,
        "MaxSim of a float32 (m, dim) query against a list of (n_i, dim) float32/float16 documents -> float32 (n,).");
  m.def("maxsim_packed", &maxsim_packed, py::arg("query_vectors"), py::arg("tokens"), py::arg("offsets"),
        py::arg("doc_ids") = py::none(), py::arg("n_threads") = 0, py::arg("check_finite") = true,
        "MaxSim against documents packed as tokens (total, dim) + offsets (n + 1); doc_ids selects documents.");
  m.def("maxsim_explain", &maxsim_explain, py::arg("query_vectors"), py::arg("document"),
        "Per query token: (best document token index int64 (m,), its similarity float32 (m,)).");
  m.def(
      "first_non_finite",
      [](const py::array& a) {
        const bool is_f32 = a.dtype().equal(py::dtype::of<float>());
        if (!is_f32 && !a.dtype().equal(py::dtype("float16")))
          throw py::type_error("array must be float32 or float16, got dtype " + std::string(py::str(a.dtype())));
        if (!(a.flags() & py::array::c_style)) throw py::value_error("array must be C-contiguous");
        const TokenDType dt = is_f32 ? TokenDType::F32 : TokenDType::F16;
        int64_t bad;
        {
          py::gil_scoped_release release;
          bad = late::first_non_finite(a.data(), static_cast<int64_t>(a.size()), dt);
        }
        return bad;
      },
      py::arg("array"), "Flat index of the first NaN/Inf in a C-contiguous float32/float16 array, or -1.");
}

}  // namespace ragfind::bindings
