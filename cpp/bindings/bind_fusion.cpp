// Bindings for the rank and score fusion: ragfind._core.rrf / fuse_scores.
//
// Ids come as int arrays (any integer dtype), Python lists of int, or lists / numpy arrays of
// str. Integer ids go straight to the C++ core. str ids are interned here, with the GIL held,
// into dense codes in first-appearance order: one hash probe per id using the hash every Python
// str caches, pointer equality first and a memcmp only when two distinct objects share a hash.
// The core then skips its own hash table (Options::dense_codes) and runs without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "ragfind/fusion/rrf.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

enum class IdKind { Unknown, Int, Str };

// One parsed input list; `holder` keeps the Python objects behind the raw pointers alive.
struct ParsedList {
  std::vector<py::object> holder;
  const int64_t* ids = nullptr;
  std::vector<int64_t> own_ids;     // ids converted from a Python list (or str codes)
  PyObject* const* strs = nullptr;  // str mode: borrowed items of a list
  size_t size = 0;
  const double* scores = nullptr;
  size_t n_scores = 0;
};

bool is_pair(py::handle item) {
  if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) != 2) return false;
  PyObject* first = PyTuple_GET_ITEM(item.ptr(), 0);
  return !PyUnicode_Check(first) && !PyLong_Check(first) &&
         (PyList_Check(first) || PyTuple_Check(first) || py::isinstance<py::array>(first));
}

void set_kind(IdKind& kind, IdKind seen, size_t li) {
  if (kind == IdKind::Unknown) kind = seen;
  else if (kind != seen)
    throw py::type_error("lists[" + std::to_string(li) +
                         "] mixes id types with the earlier lists; all ids must be int or all str");
}

void parse_ids(py::handle ids, size_t li, IdKind& kind, ParsedList& out) {
  if (py::isinstance<py::array>(ids)) {
    py::array a = py::reinterpret_borrow<py::array>(ids);
    if (a.ndim() != 1)
      throw py::value_error("lists[" + std::to_string(li) + "] ids have shape with " + std::to_string(a.ndim()) +
                            " dimensions; expected a 1-D array");
    const char k = a.dtype().kind();
    if (k == 'i' || k == 'u') {
      auto a64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
      if (!a64) throw py::error_already_set();
      if (a64.size() > 0) set_kind(kind, IdKind::Int, li);
      out.ids = a64.data();
      out.size = static_cast<size_t>(a64.size());
      out.holder.push_back(std::move(a64));
      return;
    }
    if (k == 'U' || k == 'O' || k == 'S') {
      parse_ids(a.attr("tolist")(), li, kind, out);  // the list is kept alive by `holder` below
      return;
    }
    throw py::type_error("lists[" + std::to_string(li) + "] ids have dtype " + std::string(py::str(a.dtype())) +
                         "; expected integer or str ids");
  }
  if (!PyList_Check(ids.ptr()) && !PyTuple_Check(ids.ptr()))
    throw py::type_error("lists[" + std::to_string(li) + "] is a " + type_name(ids) +
                         "; expected a list/array of ids or an (ids, scores) pair");
  py::object seq = py::reinterpret_borrow<py::object>(ids);
  PyObject* const* items = PyList_Check(seq.ptr()) ? PySequence_Fast_ITEMS(seq.ptr()) : &PyTuple_GET_ITEM(seq.ptr(), 0);
  const size_t n = static_cast<size_t>(Py_SIZE(seq.ptr()));
  out.size = n;
  if (n == 0) {
    out.holder.push_back(seq);
    return;
  }
  if (PyUnicode_Check(items[0])) {
    set_kind(kind, IdKind::Str, li);
    for (size_t i = 0; i < n; ++i)
      if (!PyUnicode_Check(items[i]))
        throw py::type_error("lists[" + std::to_string(li) + "][" + std::to_string(i) + "] is a " +
                             type_name(items[i]) + "; expected str like the rest of the list");
    out.strs = items;
    out.holder.push_back(seq);
    return;
  }
  set_kind(kind, IdKind::Int, li);
  out.own_ids.resize(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* o = items[i];
    if (PyBool_Check(o) || !(PyLong_Check(o) || PyIndex_Check(o)))
      throw py::type_error("lists[" + std::to_string(li) + "][" + std::to_string(i) + "] is a " + type_name(o) +
                           "; expected int like the rest of the list");
    py::object as_int;
    if (!PyLong_Check(o)) {  // numpy integer scalars and other __index__ types
      as_int = py::reinterpret_steal<py::object>(PyNumber_Index(o));
      if (!as_int) throw py::error_already_set();
      o = as_int.ptr();
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow)
      throw py::value_error("lists[" + std::to_string(li) + "][" + std::to_string(i) + "] does not fit in int64");
    out.own_ids[i] = v;
  }
  out.ids = out.own_ids.data();
  out.holder.push_back(seq);
}

void parse_scores(py::handle scores, size_t li, ParsedList& out) {
  if (py::isinstance<py::array>(scores)) {
    const char k = py::reinterpret_borrow<py::array>(scores).dtype().kind();
    if (k != 'f' && k != 'i' && k != 'u')
      throw py::type_error("lists[" + std::to_string(li) + "] scores have dtype " +
                           std::string(py::str(py::reinterpret_borrow<py::array>(scores).dtype())) +
                           "; expected a real number dtype");
  }
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(scores);
  if (!a) {
    PyErr_Clear();
    throw py::type_error("lists[" + std::to_string(li) + "] scores are a " + type_name(scores) +
                         "; expected a 1-D sequence of numbers");
  }
  if (a.ndim() != 1) throw py::value_error("lists[" + std::to_string(li) + "] scores must be 1-D");
  out.scores = a.data();
  out.n_scores = static_cast<size_t>(a.size());
  out.holder.push_back(std::move(a));
}

// Interns the str ids of every list into dense first-appearance codes; returns the unique strs.
std::vector<PyObject*> intern_strs(std::vector<ParsedList>& parsed) {
  size_t total = 0;
  for (auto& p : parsed) total += p.size;
  size_t cap = 16;
  while (cap < 2 * total) cap <<= 1;
  const uint64_t mask = cap - 1;
  std::vector<int32_t> table(cap, -1);
  std::vector<PyObject*> uniq;
  std::vector<Py_hash_t> uniq_hash;
  uniq.reserve(total);
  uniq_hash.reserve(total);
  for (auto& p : parsed) {
    if (!p.strs) continue;
    p.own_ids.resize(p.size);
    for (size_t i = 0; i < p.size; ++i) {
      PyObject* s = p.strs[i];
      const Py_hash_t h = PyObject_Hash(s);  // cached inside every str after the first call
      if (h == -1) throw py::error_already_set();
      uint64_t slot = (static_cast<uint64_t>(h) * 0x9E3779B97F4A7C15ull) >> (64 - __builtin_ctzll(cap));
      int32_t code;
      for (;;) {
        code = table[slot];
        if (code < 0) {
          code = static_cast<int32_t>(uniq.size());
          table[slot] = code;
          uniq.push_back(s);
          uniq_hash.push_back(h);
          break;
        }
        PyObject* t = uniq[code];
        if (t == s) break;
        if (uniq_hash[code] == h && PyUnicode_GET_LENGTH(t) == PyUnicode_GET_LENGTH(s) &&
            PyUnicode_KIND(t) == PyUnicode_KIND(s) &&
            std::memcmp(PyUnicode_DATA(t), PyUnicode_DATA(s),
                        static_cast<size_t>(PyUnicode_GET_LENGTH(s)) * PyUnicode_KIND(s)) == 0)
          break;
        slot = (slot + 1) & mask;
      }
      p.own_ids[i] = code;
    }
    p.ids = p.own_ids.data();
  }
  return uniq;
}

std::vector<ParsedList> parse_lists(py::handle lists, bool need_scores, IdKind& kind) {
  if (!PyList_Check(lists.ptr()) && !PyTuple_Check(lists.ptr()))
    throw py::type_error("lists is a " + type_name(lists) + "; expected a list of ranked lists");
  py::sequence seq = py::reinterpret_borrow<py::sequence>(lists);
  const size_t n = seq.size();
  if (n == 0) throw py::value_error("lists is empty; expected at least one ranked list");
  std::vector<ParsedList> parsed(n);
  for (size_t li = 0; li < n; ++li) {
    py::handle item = seq[li];
    if (is_pair(item)) {
      parse_ids(PyTuple_GET_ITEM(item.ptr(), 0), li, kind, parsed[li]);
      parse_scores(PyTuple_GET_ITEM(item.ptr(), 1), li, parsed[li]);
      if (parsed[li].n_scores != parsed[li].size)
        throw py::value_error("lists[" + std::to_string(li) + "] has " + std::to_string(parsed[li].size) + " ids but " +
                              std::to_string(parsed[li].n_scores) + " scores; expected as many scores as ids");
    } else {
      if (need_scores)
        throw py::type_error("lists[" + std::to_string(li) + "] is a " + type_name(item) +
                             "; score fusion needs (ids, scores) pairs");
      parse_ids(item, li, kind, parsed[li]);
    }
  }
  return parsed;
}

std::vector<double> parse_weights(py::handle weights, size_t n_lists) {
  std::vector<double> w;
  if (weights.is_none()) return w;
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(weights);
  if (!a || a.ndim() != 1) {
    PyErr_Clear();
    throw py::type_error("weights must be a 1-D sequence of numbers, one per list");
  }
  if (static_cast<size_t>(a.size()) != n_lists)
    throw py::value_error("weights has " + std::to_string(a.size()) + " entries for " + std::to_string(n_lists) +
                          " lists; expected one weight per list");
  w.assign(a.data(), a.data() + a.size());
  return w;
}

size_t parse_top_k(py::handle top_k) {
  if (top_k.is_none()) return 0;
  const long long v = top_k.cast<long long>();
  if (v <= 0) throw py::value_error("top_k = " + std::to_string(v) + "; expected a positive int or None");
  return static_cast<size_t>(v);
}

using FuseFn = std::function<size_t(fusion::Fuser&, const std::vector<fusion::RankedList>&, const fusion::Options&)>;

py::tuple run_fusion(py::handle lists, py::handle weights, py::handle top_k, bool need_scores, const FuseFn& fuse) {
  IdKind kind = IdKind::Unknown;
  std::vector<ParsedList> parsed = parse_lists(lists, need_scores, kind);
  std::vector<double> w = parse_weights(weights, parsed.size());
  fusion::Options opt;
  opt.weights = w.empty() ? nullptr : w.data();
  opt.top_k = parse_top_k(top_k);
  std::vector<PyObject*> uniq;
  if (kind == IdKind::Str) {
    uniq = intern_strs(parsed);
    opt.dense_codes = uniq.size();
  }
  std::vector<fusion::RankedList> rl(parsed.size());
  for (size_t i = 0; i < parsed.size(); ++i) rl[i] = {parsed[i].ids, parsed[i].scores, parsed[i].size};
  // One Fuser per thread keeps its scratch between calls. The fusion runs without the GIL; the
  // numpy results are allocated once the fused size is known and the ranking is written into them.
  thread_local fusion::Fuser fuser;
  size_t n = 0;
  try {
    py::gil_scoped_release release;
    n = fuse(fuser, rl, opt);
  } catch (const fusion::DuplicateIdError& e) {
    if (kind == IdKind::Str) {
      const std::string id = py::str(py::handle(parsed[e.list].strs[e.position]));
      throw py::value_error("lists[" + std::to_string(e.list) + "] holds id '" + id + "' twice (positions " +
                            std::to_string(e.first_position) + " and " + std::to_string(e.position) +
                            "); each list must rank an id at most once");
    }
    throw py::value_error(e.what());
  }
  py::array_t<double> scores(static_cast<py::ssize_t>(n));
  if (kind == IdKind::Str) {
    thread_local std::vector<int64_t> codes;
    codes.resize(n);
    fuser.write(codes.data(), scores.mutable_data());
    py::array ids(py::dtype("O"), {static_cast<py::ssize_t>(n)}, {});
    PyObject** slots = static_cast<PyObject**>(ids.mutable_data());
    for (size_t i = 0; i < n; ++i) {
      PyObject* s = uniq[static_cast<size_t>(codes[i])];
      Py_INCREF(s);
      Py_XDECREF(slots[i]);
      slots[i] = s;
    }
    return py::make_tuple(std::move(ids), std::move(scores));
  }
  py::array_t<int64_t> ids(static_cast<py::ssize_t>(n));
  fuser.write(ids.mutable_data(), scores.mutable_data());
  return py::make_tuple(std::move(ids), std::move(scores));
}

}  // namespace

void bind_fusion(py::module_& m) {
  m.def(
      "rrf",
      [](py::handle lists, double k, py::handle weights, py::handle top_k) {
        return run_fusion(lists, weights, top_k, false,
                          [k](fusion::Fuser& f, const std::vector<fusion::RankedList>& rl, const fusion::Options& opt) {
                            return f.rrf(rl, k, opt);
                          });
      },
      py::arg("lists"), py::arg("k") = 60.0, py::arg("weights") = py::none(), py::arg("top_k") = py::none(),
      "Reciprocal rank fusion of ranked id lists (best first). Returns (ids, scores) best first.");
  m.def(
      "fuse_scores",
      [](py::handle lists, const std::string& norm, const std::string& method, py::handle weights, py::handle top_k) {
        const fusion::Norm n = fusion::parse_norm(norm);
        const fusion::Combine c = fusion::parse_combine(method);
        return run_fusion(lists, weights, top_k, true,
                          [n, c](fusion::Fuser& f, const std::vector<fusion::RankedList>& rl,
                                 const fusion::Options& opt) { return f.fuse_scores(rl, n, c, opt); });
      },
      py::arg("lists"), py::arg("norm") = "min-max", py::arg("method") = "sum", py::arg("weights") = py::none(),
      py::arg("top_k") = py::none(),
      "Score fusion of (ids, scores) lists: per-list normalisation then weighted combination.");
}

}  // namespace ragfind::bindings
