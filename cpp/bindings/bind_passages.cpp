// Bindings for the passage columns (ragfind/passages/columns.hpp): ragfind._core.PassageColumnsView,
// a view of the columns' arrays checked once when made, whose calls read the rows of a few chunk
// ids straight into Python objects: the store's row tuples, or the passages of a ranked list.
// The GIL stays held: the work is a few binary searches and the Python objects it creates.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <string_view>

#include "bindings.hpp"
#include "ragfind/passages/columns.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

using I64 = py::array_t<int64_t, py::array::c_style>;
using U8 = py::array_t<uint8_t, py::array::c_style>;
using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;

template <class A>
A exact(const py::handle& h, const char* name, int ndim, py::ssize_t width) {
  if (!A::check_(h))
    throw py::type_error(std::string(name) + ": expected a C-contiguous numpy array of " +
                         py::str(py::dtype::of<typename A::value_type>()).cast<std::string>());
  A a = py::reinterpret_borrow<A>(h);
  if (a.ndim() != ndim || (ndim == 2 && a.shape(1) != width))
    throw py::value_error(std::string(name) + ": expected " + std::to_string(ndim) + "-D" +
                          (ndim == 2 ? " with " + std::to_string(width) + " columns" : std::string()) + ", got " +
                          std::to_string(a.ndim()) + "-D");
  return a;
}

// A new reference, or error_already_set.
PyObject* own(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return o;
}

PyObject* text(std::string_view s) {
  // "replace": the arena of a memory-mapped file is checked for bounds, not for UTF-8.
  return own(PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), "replace"));
}

// dict[key] = value, stealing value.
void put(PyObject* dict, PyObject* key, PyObject* value) {
  const int rc = PyDict_SetItem(dict, key, value);
  Py_DECREF(value);
  if (rc != 0) throw py::error_already_set();
}

// obj.name = value as object.__setattr__ does (past a frozen class's __setattr__; into the
// instance's own attribute storage, no dict made), stealing value.
void set(PyObject* obj, PyObject* name, PyObject* value) {
  const int rc = PyObject_GenericSetAttr(obj, name, value);
  Py_DECREF(value);
  if (rc != 0) throw py::error_already_set();
}

constexpr int kFields = 13;
const char* const kFieldNames[kFields] = {"id",  "doc_id",   "text",    "title", "source", "score",      "start",
                                          "end", "metadata", "context", "ranks", "scores", "_highlights"};

class ColumnsHandle {
 public:
  ColumnsHandle(const py::handle& arena, const py::handle& chunks, const py::handle& docs, const py::handle& keys,
                const py::handle& slots, py::type cls, py::object empty, py::function metadata_of)
      : arena_(exact<U8>(arena, "arena", 1, 0)),
        chunks_(exact<I64>(chunks, "chunks", 2, passages::kChunkColumns)),
        docs_(exact<I64>(docs, "docs", 2, passages::kDocColumns)),
        keys_(exact<I64>(keys, "keys", 1, 0)),
        slots_(exact<I64>(slots, "slots", 1, 0)),
        cls_(std::move(cls)),
        empty_(std::move(empty)),
        metadata_of_(std::move(metadata_of)) {
    if (slots_.shape(0) != keys_.shape(0))
      throw py::value_error("slots: " + std::to_string(slots_.shape(0)) + " rows for " +
                            std::to_string(keys_.shape(0)) + " keys; expected as many");
    v_ = passages::ColumnsView{reinterpret_cast<const char*>(arena_.data()),
                               arena_.shape(0),
                               chunks_.data(),
                               chunks_.shape(0),
                               docs_.data(),
                               docs_.shape(0),
                               keys_.data(),
                               slots_.data(),
                               keys_.shape(0)};
    for (int i = 0; i < kFields; ++i)
      names_[i] = py::reinterpret_steal<py::object>(own(PyUnicode_InternFromString(kFieldNames[i])));
    fused_ = py::reinterpret_steal<py::object>(own(PyUnicode_InternFromString("fused")));
  }

  py::list rows(const I64& ids) const {
    if (ids.ndim() != 1) throw py::value_error("ids: expected a 1-D array");
    py::list out;
    const int64_t* q = ids.data();
    try {
      for (py::ssize_t i = 0; i < ids.shape(0); ++i) {
        const int64_t row = passages::find_row(v_, q[i]);
        if (row < 0) continue;
        const passages::PassageRow r = passages::read_row(v_, row);
        py::tuple t(8);
        PyObject* o = t.ptr();
        PyTuple_SET_ITEM(o, 0, own(PyLong_FromLongLong(r.id)));
        PyTuple_SET_ITEM(o, 1, text(r.doc_id));
        PyTuple_SET_ITEM(o, 2, text(r.text));
        PyTuple_SET_ITEM(o, 3, text(r.title));
        PyTuple_SET_ITEM(o, 4, own(PyLong_FromLongLong(r.start)));
        PyTuple_SET_ITEM(o, 5, own(PyLong_FromLongLong(r.end)));
        PyTuple_SET_ITEM(o, 6, text(r.metadata));
        PyTuple_SET_ITEM(o, 7, text(r.context));
        out.append(std::move(t));
      }
    } catch (const std::out_of_range& e) { throw py::value_error(e.what()); }
    return out;
  }

  py::list passages(const I64& ids, const F64& fused, const F64& stage_scores, const py::str& stage,
                    const py::tuple& rank_views, const py::object& highlights) const {
    const py::ssize_t n = ids.ndim() == 1 ? ids.shape(0) : -1;
    if (n < 0 || fused.ndim() != 1 || fused.shape(0) != n || stage_scores.ndim() != 1 || stage_scores.shape(0) < n)
      throw py::value_error("ids and fused must be 1-D of one length, stage_scores 1-D at least as long; got " +
                            std::to_string(n) + ", " + std::to_string(fused.size()) + ", " +
                            std::to_string(stage_scores.size()));
    PyObject* const* names = reinterpret_cast<PyObject* const*>(names_);
    PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls_.ptr());
    py::tuple no_args(0);
    py::list out;
    const int64_t* q = ids.data();
    const double* f = fused.data();
    const double* ss = stage_scores.data();
    try {
      for (py::ssize_t i = 0; i < n; ++i) {
        const int64_t row = passages::find_row(v_, q[i]);
        if (row < 0) continue;
        const passages::PassageRow r = passages::read_row(v_, row);
        // object.__new__(cls), then each field set as the dataclass __init__ sets it.
        py::object p = py::reinterpret_steal<py::object>(own(type->tp_new(type, no_args.ptr(), nullptr)));
        PyObject* o = p.ptr();
        py::object doc_id = py::reinterpret_steal<py::object>(text(r.doc_id));
        py::object score = py::reinterpret_steal<py::object>(own(PyFloat_FromDouble(f[i])));
        set(o, names[0], own(PyLong_FromLongLong(r.id)));
        set(o, names[1], Py_NewRef(doc_id.ptr()));
        set(o, names[2], text(r.text));
        set(o, names[3], text(r.title));
        if (r.metadata == "{}") {
          set(o, names[4], Py_NewRef(doc_id.ptr()));
          set(o, names[8], Py_NewRef(empty_.ptr()));
        } else {
          py::object got = metadata_of_(py::reinterpret_steal<py::object>(text(r.metadata)), doc_id);
          if (!PyTuple_Check(got.ptr()) || PyTuple_GET_SIZE(got.ptr()) != 2)
            throw py::type_error("metadata_of must return a (metadata, source) tuple");
          set(o, names[4], Py_NewRef(PyTuple_GET_ITEM(got.ptr(), 1)));
          set(o, names[8], Py_NewRef(PyTuple_GET_ITEM(got.ptr(), 0)));
        }
        set(o, names[5], Py_NewRef(score.ptr()));
        set(o, names[6], own(PyLong_FromLongLong(r.start)));
        set(o, names[7], own(PyLong_FromLongLong(r.end)));
        set(o, names[9], text(r.context));
        if (i < PyTuple_GET_SIZE(rank_views.ptr())) {
          set(o, names[10], Py_NewRef(PyTuple_GET_ITEM(rank_views.ptr(), i)));
        } else {
          py::dict ranks;
          ranks[stage] = py::int_(i + 1);
          set(o, names[10], own(PyDictProxy_New(ranks.ptr())));
        }
        py::object scores = py::reinterpret_steal<py::object>(own(PyDict_New()));
        put(scores.ptr(), stage.ptr(), own(PyFloat_FromDouble(ss[i])));
        put(scores.ptr(), fused_.ptr(), Py_NewRef(score.ptr()));
        set(o, names[11], own(PyDictProxy_New(scores.ptr())));
        set(o, names[12], Py_NewRef(highlights.ptr()));
        out.append(std::move(p));
      }
    } catch (const std::out_of_range& e) { throw py::value_error(e.what()); }
    return out;
  }

 private:
  U8 arena_;
  I64 chunks_, docs_, keys_, slots_;
  py::type cls_;
  py::object empty_;
  py::function metadata_of_;
  passages::ColumnsView v_;
  py::object names_[kFields];
  py::object fused_;
};

}  // namespace

void bind_passages(py::module_& m) {
  py::class_<ColumnsHandle>(m, "PassageColumnsView",
                            "A read-only view of the passage columns (arrays checked once, kept alive):\n"
                            "``arena`` (uint8), ``chunks`` (int64, n x 8), ``docs`` (int64, n x 6), ``keys``\n"
                            "(live chunk ids ascending, int64) and ``slots`` (their chunk rows, int64);\n"
                            "``cls``, ``empty`` and ``metadata_of`` are what :meth:`passages` builds with.\n"
                            "TypeError for another dtype; ValueError for another shape.")
      .def(py::init<const py::handle&, const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                    py::type, py::object, py::function>(),
           py::arg("arena"), py::arg("chunks"), py::arg("docs"), py::arg("keys"), py::arg("slots"), py::arg("cls"),
           py::arg("empty"), py::arg("metadata_of"))
      .def("rows", &ColumnsHandle::rows, py::arg("ids"),
           "The rows ``(id, doc_id, text, title, start, end, metadata, context)`` of the live chunks\n"
           "``ids`` (int64 1-D), in the order given, absent ids skipped. ValueError for corrupt\n"
           "columns (an offset outside them).")
      .def("passages", &ColumnsHandle::passages, py::arg("ids"), py::arg("fused"), py::arg("stage_scores"),
           py::arg("stage"), py::arg("rank_views"), py::arg("highlights"),
           "The passages of one ranked list: for each live chunk of ``ids`` (best first, absent ids\n"
           "skipped) an instance of ``cls`` (``object.__new__(cls)``) whose ``__dict__`` holds the\n"
           "row's fields, ``score`` = ``fused[i]``, ``ranks`` = ``rank_views[i]`` (a read-only\n"
           "``{stage: i + 1}`` past their end), ``scores`` = read-only ``{stage: stage_scores[i],\n"
           "'fused': fused[i]}``, ``_highlights`` = ``highlights``, and ``metadata``/``source``:\n"
           "``empty`` and the document id for the JSON ``{}``, else ``metadata_of(json, doc_id)``\n"
           "-> ``(metadata, source)``. ValueError for corrupt columns.");
}

}  // namespace ragfind::bindings
