// Bindings for the passage columns (ragfind/passages/columns.hpp): ragfind._core.PassageColumnsView,
// a view of the columns' arrays checked once when made, whose calls read the rows of a few chunk
// ids straight into Python objects: the store's row tuples, or the passages of a ranked list.
// The GIL stays held: the work is a few binary searches and the Python objects it creates.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <structmember.h>

#include <cmath>
#include <cstring>
#include <memory>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.hpp"
#include "json_writer.hpp"
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

// Copies s to dst while checking it is ASCII, 64 bytes at a time (one read of the text); false
// at the first block with a byte >= 0x80 (dst then holds a partial copy).
bool copy_ascii(char* dst, std::string_view s) {
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  const char* src = s.data();
  const size_t n = s.size();
  size_t i = 0;
#if defined(__SSE2__)  // every x86-64 CPU: four 16-byte moves and one sign-bit mask a block
  for (; i + 64 <= n; i += 64) {
    const auto* in = reinterpret_cast<const __m128i*>(src + i);
    auto* out = reinterpret_cast<__m128i*>(dst + i);
    const __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1);
    const __m128i c = _mm_loadu_si128(in + 2), d = _mm_loadu_si128(in + 3);
    _mm_storeu_si128(out, a);
    _mm_storeu_si128(out + 1, b);
    _mm_storeu_si128(out + 2, c);
    _mm_storeu_si128(out + 3, d);
    if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d))) != 0) return false;
  }
#else
  for (; i + 64 <= n; i += 64) {
    uint64_t any = 0;
    for (size_t j = 0; j < 64; j += 8) {
      uint64_t w;
      std::memcpy(&w, src + i + j, 8);
      std::memcpy(dst + i + j, &w, 8);
      any |= w;
    }
    if (any & kHigh) return false;
  }
#endif
  uint64_t any = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, src + i, 8);
    std::memcpy(dst + i, &w, 8);
    any |= w;
  }
  for (; i < n; ++i) {
    dst[i] = src[i];
    any |= static_cast<unsigned char>(src[i]);
  }
  return (any & kHigh) == 0;
}

PyObject* text(std::string_view s) {
  const auto n = static_cast<py::ssize_t>(s.size());
  // Most passages are ASCII: copied into a new 1-byte str as they are checked, without the
  // UTF-8 decoder's scan.
  PyObject* o = own(PyUnicode_New(n, 127));
  if (copy_ascii(reinterpret_cast<char*>(PyUnicode_1BYTE_DATA(o)), s)) return o;
  Py_DECREF(o);
  // "replace": the arena of a memory-mapped file is checked for bounds, not for UTF-8.
  return own(PyUnicode_DecodeUTF8(s.data(), n, "replace"));
}

// o, a passage, no longer tracked by the cyclic garbage collector: it can hold no reference
// cycle (strings, numbers, read-only views of private dicts, its highlights), and a results
// cache keeps thousands that every collection would walk again. Only for instances of Python
// classes: their dealloc (subtype_dealloc) untracks with the checked call; a built-in type's
// may not (a mappingproxy's unlinks unconditionally).
PyObject* untracked(PyObject* o) {
  PyObject_GC_UnTrack(o);
  return o;
}

// dict[key] = value, stealing value.
void put(PyObject* dict, PyObject* key, PyObject* value) {
  const int rc = PyDict_SetItem(dict, key, value);
  Py_DECREF(value);
  if (rc != 0) throw py::error_already_set();
}

constexpr int kFields = 13;

// The byte offset of a slot from its member descriptor (what the descriptor itself writes to).
py::ssize_t slot_offset(const py::handle& d, int i) {
  if (Py_TYPE(d.ptr()) != &PyMemberDescr_Type)
    throw py::type_error("fields[" + std::to_string(i) + "]: expected a slot's member descriptor, got " +
                         std::string(Py_TYPE(d.ptr())->tp_name));
  const PyMemberDef* m = reinterpret_cast<PyMemberDescrObject*>(d.ptr())->d_member;
  if (m->type != T_OBJECT_EX || (m->flags & READONLY) != 0)
    throw py::type_error("fields[" + std::to_string(i) + "]: expected a writable object slot");
  return m->offset;
}

// The offsets of fields (slot member descriptors) in instances of type, each checked to lie
// inside an instance.
std::vector<py::ssize_t> slot_offsets(const PyTypeObject* type, const py::tuple& fields) {
  std::vector<py::ssize_t> offsets;
  for (py::ssize_t i = 0; i < static_cast<py::ssize_t>(fields.size()); ++i) {
    const py::ssize_t at = slot_offset(fields[i], static_cast<int>(i));
    if (at < static_cast<py::ssize_t>(sizeof(PyObject)) ||
        at + static_cast<py::ssize_t>(sizeof(PyObject*)) > type->tp_basicsize)
      throw py::value_error("fields[" + std::to_string(i) + "]: not a slot of " + std::string(type->tp_name));
    offsets.push_back(at);
  }
  return offsets;
}

// The slot at offset of obj = value (stolen), written as its member descriptor would (past a
// frozen __setattr__ and the lazy highlights).
void write_slot(PyObject* obj, py::ssize_t offset, PyObject* value) {
  PyObject** at = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset);
  PyObject* old = *at;
  *at = value;
  Py_XDECREF(old);
}

// One ranked list as ColumnsHandle reads it: chunk ids and, by rank, the fused score (a list of
// floats, the RRF table's own objects, shared, not copied; or an array) and the stage's score
// (float32, as BM25 and dense stages give it, read as is; any other dtype as float64).
struct RankedList {
  RankedList(const I64& ids_, const py::object& fused, const py::array& stage_scores)
      : fused_list(PyList_CheckExact(fused.ptr())), fused_obj(fused) {
    // (An empty handle, not F64(), where no conversion is needed: F64() makes a numpy array.)
    fused_array = fused_list ? py::reinterpret_borrow<F64>(py::handle()) : F64::ensure(fused);
    if (!fused_list && !fused_array) throw py::error_already_set();
    const bool f32 = py::array_t<float, py::array::c_style>::check_(stage_scores) && stage_scores.ndim() == 1;
    ss64 = f32 ? py::reinterpret_borrow<F64>(py::handle()) : F64::ensure(stage_scores);
    if (!f32 && !ss64) throw py::error_already_set();
    ss32 = f32 ? static_cast<const float*>(stage_scores.data()) : nullptr;
    n = ids_.ndim() == 1 ? ids_.shape(0) : -1;
    const py::ssize_t n_fused = fused_list                ? PyList_GET_SIZE(fused.ptr())
                                : fused_array.ndim() == 1 ? fused_array.shape(0)
                                                          : -1;
    if (n < 0 || n_fused < n || stage_scores.ndim() != 1 || stage_scores.shape(0) < n)
      throw py::value_error("ids must be 1-D, fused and stage_scores 1-D and at least as long; got " +
                            std::to_string(n) + ", " + std::to_string(n_fused) + ", " +
                            std::to_string(stage_scores.size()));
    ids = ids_.data();
  }

  // The fused score of rank i as a float: a new reference (the list's own float, or a
  // conversion, which may raise).
  PyObject* fused_at(py::ssize_t i) const {
    if (!fused_list) return PyFloat_FromDouble(fused_array.data()[i]);
    PyObject* item = PyList_GET_ITEM(fused_obj.ptr(), i);
    return PyFloat_CheckExact(item) ? Py_NewRef(item) : PyNumber_Float(item);
  }
  double stage_at(py::ssize_t i) const { return ss32 != nullptr ? static_cast<double>(ss32[i]) : ss64.data()[i]; }

  const bool fused_list;
  const py::object& fused_obj;
  F64 fused_array, ss64;
  const float* ss32 = nullptr;
  const int64_t* ids = nullptr;
  py::ssize_t n = 0;
};

class ColumnsHandle {
 public:
  ColumnsHandle(const py::handle& arena, const py::handle& chunks, const py::handle& docs, const py::handle& keys,
                const py::handle& slots, py::type cls, const py::tuple& fields, py::object empty,
                py::function metadata_of, py::ssize_t n_keys)
      : arena_(exact<U8>(arena, "arena", 1, 0)),
        chunks_(exact<I64>(chunks, "chunks", 2, passages::kChunkColumns)),
        docs_(exact<I64>(docs, "docs", 2, passages::kDocColumns)),
        keys_(exact<I64>(keys, "keys", 1, 0)),
        slots_(exact<I64>(slots, "slots", 1, 0)),
        cls_(std::move(cls)),
        empty_(std::move(empty)),
        metadata_of_(std::move(metadata_of)) {
    if (n_keys < 0) {
      if (slots_.shape(0) != keys_.shape(0))
        throw py::value_error("slots: " + std::to_string(slots_.shape(0)) + " rows for " +
                              std::to_string(keys_.shape(0)) + " keys; expected as many");
      n_keys = keys_.shape(0);
    }
    v_ = passages::ColumnsView{reinterpret_cast<const char*>(arena_.data()),
                               arena_.shape(0),
                               chunks_.data(),
                               chunks_.shape(0),
                               docs_.data(),
                               docs_.shape(0),
                               keys_.data(),
                               slots_.data(),
                               0};
    set_keys(n_keys);
    if (fields.size() != kFields)
      throw py::value_error("fields: expected " + std::to_string(kFields) + " slot descriptors, got " +
                            std::to_string(fields.size()));
    offsets_ = slot_offsets(reinterpret_cast<PyTypeObject*>(cls_.ptr()), fields);
    fused_ = py::reinterpret_steal<py::object>(own(PyUnicode_InternFromString("fused")));
  }

  // The first n entries of keys and slots are the live ones (the rest is room to grow): an
  // append that wrote into that room, or a truncation, needs no new view.
  void set_keys(py::ssize_t n) {
    if (n < 0 || n > keys_.shape(0) || n > slots_.shape(0))
      throw py::value_error("n_keys: " + std::to_string(n) + " outside the " + std::to_string(keys_.shape(0)) +
                            " keys and " + std::to_string(slots_.shape(0)) + " slots");
    v_.n_keys = n;
  }

  py::list rows(const I64& ids) const {
    if (ids.ndim() != 1) throw py::value_error("ids: expected a 1-D array");
    py::list out;
    const int64_t* q = ids.data();
    try {
      for (const passages::FoundRow& found : passages::read_rows(v_, q, ids.shape(0))) {
        const passages::PassageRow& r = found.row;
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

  py::tuple passages(const I64& ids, const py::object& fused, const py::array& stage_scores, const py::str& stage,
                     const py::tuple& rank_views, const py::object& highlights, const py::object& texts) const {
    if (!texts.is_none() && !PyList_CheckExact(texts.ptr())) throw py::type_error("texts: expected a list or None");
    const RankedList list(ids, fused, stage_scores);
    PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls_.ptr());
    py::tuple no_args(0);
    try {
      const std::vector<passages::FoundRow> rows = passages::read_rows(v_, list.ids, list.n);
      py::tuple out(rows.size());
      py::ssize_t j = 0;
      for (const passages::FoundRow& found : rows) {
        const py::ssize_t i = found.at;
        const passages::PassageRow& r = found.row;
        py::object score = py::reinterpret_steal<py::object>(own(list.fused_at(i)));
        const double stage_score = list.stage_at(i);
        // object.__new__(cls), then each field written to its slot.
        py::object p = py::reinterpret_steal<py::object>(own(type->tp_new(type, no_args.ptr(), nullptr)));
        PyObject* o = p.ptr();
        py::object doc_id = py::reinterpret_steal<py::object>(text(r.doc_id));
        slot(o, 0, own(PyLong_FromLongLong(r.id)));
        slot(o, 1, Py_NewRef(doc_id.ptr()));
        PyObject* body = text(r.text);
        if (!texts.is_none() && PyList_Append(texts.ptr(), body) != 0) {
          Py_DECREF(body);
          throw py::error_already_set();
        }
        slot(o, 2, body);
        slot(o, 3, text(r.title));
        if (r.metadata == "{}") {
          slot(o, 4, Py_NewRef(doc_id.ptr()));
          slot(o, 8, Py_NewRef(empty_.ptr()));
        } else {
          py::object got = metadata_of_(py::reinterpret_steal<py::object>(text(r.metadata)), doc_id);
          if (!PyTuple_Check(got.ptr()) || PyTuple_GET_SIZE(got.ptr()) != 2)
            throw py::type_error("metadata_of must return a (metadata, source) tuple");
          slot(o, 4, Py_NewRef(PyTuple_GET_ITEM(got.ptr(), 1)));
          slot(o, 8, Py_NewRef(PyTuple_GET_ITEM(got.ptr(), 0)));
        }
        slot(o, 5, Py_NewRef(score.ptr()));
        slot(o, 6, own(PyLong_FromLongLong(r.start)));
        slot(o, 7, own(PyLong_FromLongLong(r.end)));
        slot(o, 9, text(r.context));
        if (i < PyTuple_GET_SIZE(rank_views.ptr())) {
          slot(o, 10, Py_NewRef(PyTuple_GET_ITEM(rank_views.ptr(), i)));
        } else {
          py::dict ranks;
          ranks[stage] = py::int_(i + 1);
          slot(o, 10, own(PyDictProxy_New(ranks.ptr())));
        }
        py::object scores = py::reinterpret_steal<py::object>(own(PyDict_New()));
        put(scores.ptr(), stage.ptr(), own(PyFloat_FromDouble(stage_score)));
        put(scores.ptr(), fused_.ptr(), Py_NewRef(score.ptr()));
        slot(o, 11, own(PyDictProxy_New(scores.ptr())));
        slot(o, 12, Py_NewRef(highlights.ptr()));
        PyTuple_SET_ITEM(out.ptr(), j++, untracked(p.release().ptr()));
      }
      return out;
    } catch (const std::out_of_range& e) { throw py::value_error(e.what()); }
  }

  // The JSON text of the result rows of passages(ids, fused, stage_scores, stage, ...), written
  // from the columns with no passage made, or None (see the binding's docstring).
  py::object rows_json(const I64& ids, const py::object& fused, const py::array& stage_scores,
                       const py::str& stage) const {
    const RankedList list(ids, fused, stage_scores);
    json::ByteWriter stage_key;  // '"name":'
    if (!PyUnicode_CheckExact(stage.ptr()) || !json::write_str(stage_key, stage.ptr())) return py::none();
    stage_key.push_back(':');
    std::vector<passages::FoundRow> rows;
    try {
      rows = passages::read_rows(v_, list.ids, list.n);
    } catch (const std::out_of_range& e) { throw py::value_error(e.what()); }
    PyObject* answer = json::written_bytes([&](json::ByteWriter& out) {
      return json::write_array_with(out, rows.size(), [&](json::ByteWriter& o, size_t j) {
        return write_row_json(o, rows[j], list, stage_key.view());
      });
    });
    if (answer == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(answer);
  }

 private:
  // One row of rows_json: the keys and values of the serving layer's result row (ROW_KEYS, in
  // order) for the passage passages() would make of found; false where rows_json answers None.
  bool write_row_json(json::ByteWriter& out, const passages::FoundRow& found, const RankedList& list,
                      std::string_view stage_key) const {
    const passages::PassageRow& r = found.row;
    const py::ssize_t i = found.at;
    const auto quoted = [&](std::string_view s) {
      out.push_back('"');
      if (!text::json::write_utf8(out, s)) return false;
      out.push_back('"');
      return true;
    };
    out.append("{\"doc_id\":");
    if (!quoted(r.doc_id)) return false;
    out.append(",\"chunk_id\":");
    json::write_int64(out, r.id);
    out.append(",\"title\":");
    if (!quoted(r.title)) return false;
    out.append(",\"text\":");
    if (!quoted(r.text)) return false;
    py::object score = py::reinterpret_steal<py::object>(own(list.fused_at(i)));
    const double fused = PyFloat_AS_DOUBLE(score.ptr());
    out.append(",\"score\":");
    json::write_float(out, fused);
    out.append(",\"ranks\":{");
    out.append(stage_key);
    json::write_int64(out, static_cast<long long>(i) + 1);
    out.append("},\"scores\":{");
    out.append(stage_key);
    json::write_float(out, list.stage_at(i));
    out.append(",\"fused\":");
    json::write_float(out, fused);
    out.append("},\"metadata\":");
    if (r.metadata == "{}") {
      out.append("{},\"source\":");
      if (!quoted(r.doc_id)) return false;
    } else {
      py::object doc_id = py::reinterpret_steal<py::object>(text(r.doc_id));
      py::object got = metadata_of_(py::reinterpret_steal<py::object>(text(r.metadata)), doc_id);
      if (!PyTuple_Check(got.ptr()) || PyTuple_GET_SIZE(got.ptr()) != 2)
        throw py::type_error("metadata_of must return a (metadata, source) tuple");
      PyObject* metadata = json::dict_behind(PyTuple_GET_ITEM(got.ptr(), 0));
      if (metadata == nullptr || !json::write_value(out, metadata)) return false;
      out.append(",\"source\":");
      if (!json::write_value(out, PyTuple_GET_ITEM(got.ptr(), 1))) return false;
    }
    out.append(",\"start\":");
    json::write_int64(out, r.start);
    out.append(",\"end\":");
    json::write_int64(out, r.end);
    out.push_back('}');
    return true;
  }

  U8 arena_;
  I64 chunks_, docs_, keys_, slots_;
  py::type cls_;
  py::object empty_;
  py::function metadata_of_;
  passages::ColumnsView v_;
  std::vector<py::ssize_t> offsets_;  // kFields

  // Field i of a new passage = value (stolen).
  void slot(PyObject* obj, int i, PyObject* value) const { write_slot(obj, offsets_[i], value); }
  py::object fused_;
};

// A slotted class and its fields' offsets: what a slot filler makes instances of.
struct SlotFiller {
  PyTypeObject* type;  // owned
  std::vector<py::ssize_t> offsets;
  bool untrack;  // the instances leave the cyclic collector's lists
};

constexpr const char* kFillerCapsule = "ragfind._core.slot_filler";

// filler(*values): a new instance of the class, values written to its slots in field order,
// past __init__ and __setattr__. A METH_FASTCALL function: no argument tuple, no pybind11
// dispatch, as a search makes one per result.
PyObject* fill_slots(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const auto* f = static_cast<const SlotFiller*>(PyCapsule_GetPointer(self, kFillerCapsule));
  if (f == nullptr) return nullptr;
  if (nargs != static_cast<Py_ssize_t>(f->offsets.size())) {
    PyErr_Format(PyExc_TypeError, "%s filler: expected %zd values, got %zd", f->type->tp_name,
                 static_cast<Py_ssize_t>(f->offsets.size()), nargs);
    return nullptr;
  }
  PyObject* no_args = PyTuple_New(0);  // the shared empty tuple
  if (no_args == nullptr) return nullptr;
  PyObject* o = f->type->tp_new(f->type, no_args, nullptr);
  Py_DECREF(no_args);
  if (o == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) write_slot(o, f->offsets[i], Py_NewRef(args[i]));
  return f->untrack ? untracked(o) : o;
}

PyMethodDef fill_slots_def = {"slot_filler", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fill_slots)),
                              METH_FASTCALL, "A new instance from its field values, in field order."};

void free_filler(PyObject* capsule) {
  auto* f = static_cast<SlotFiller*>(PyCapsule_GetPointer(capsule, kFillerCapsule));
  if (f == nullptr) return;
  Py_XDECREF(reinterpret_cast<PyObject*>(f->type));
  delete f;
}

py::object slot_filler(const py::type& cls, const py::tuple& fields, bool untrack) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  std::vector<py::ssize_t> offsets = slot_offsets(type, fields);
  if (untrack && (!PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE) || !PyType_IS_GC(type)))
    throw py::value_error(std::string("untrack: ") + type->tp_name +
                          " is not a class with slots for objects (only those can leave the collector)");
  auto* f = new SlotFiller{type, std::move(offsets), untrack};
  Py_INCREF(cls.ptr());
  PyObject* capsule = PyCapsule_New(f, kFillerCapsule, free_filler);
  if (capsule == nullptr) {
    Py_DECREF(cls.ptr());
    delete f;
    throw py::error_already_set();
  }
  PyObject* fn = PyCFunction_NewEx(&fill_slots_def, capsule, nullptr);
  Py_DECREF(capsule);
  if (fn == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}

// ----- JSON rows: a passage's fields as a dict orjson or the json module encodes, in the serving
// layer's key order, without a Python loop over fields.

constexpr int kRowFields = 11;
constexpr int kRowId = 1, kRowScore = 4, kRowRanks = 5, kRowScores = 6, kRowMetadata = 7;

struct RowMaker {
  PyTypeObject* type;                // owned: the passage class read natively
  std::vector<py::ssize_t> offsets;  // kRowFields slot offsets, in row order
  PyObject* names[kRowFields];       // owned, interned: the row's keys
  std::string keys[kRowFields];      // each key as JSON text, '"name":' (after a ',' past the first)
};

constexpr const char* kRowCapsule = "ragfind._core.json_row_maker";

// A finite float as it is, a NaN or an infinity as None (JSON has neither); a new reference.
PyObject* finite_or_none(PyObject* v) { return Py_NewRef(std::isfinite(PyFloat_AS_DOUBLE(v)) ? v : Py_None); }

// Copies a mapping of str -> int (ints) or str -> float (floats, non-finite as None); nullptr
// without an error set when a value is of another type (the caller's fallback converts it).
PyObject* copy_numbers(PyObject* d, bool floats) {
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(d, &pos, &key, &value))
    if (!PyUnicode_CheckExact(key) || !(floats ? PyFloat_CheckExact(value) : PyLong_CheckExact(value))) return nullptr;
  PyObject* out = PyDict_New();
  if (out == nullptr) return nullptr;
  pos = 0;
  while (PyDict_Next(d, &pos, &key, &value)) {
    PyObject* v = floats ? finite_or_none(value) : Py_NewRef(value);
    const int rc = PyDict_SetItem(out, key, v);
    Py_DECREF(v);
    if (rc != 0) {
      Py_DECREF(out);
      return nullptr;
    }
  }
  return out;
}

// The fields json_row reads, and its mappings; false when it would leave the passage to the fallback.
bool row_fields(const RowMaker& f, PyObject* p, PyObject* (&v)[kRowFields]) {
  if (Py_TYPE(p) != f.type) return false;
  for (int i = 0; i < kRowFields; ++i) {
    v[i] = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(p) + f.offsets[static_cast<size_t>(i)]);
    if (v[i] == nullptr) return false;
  }
  if (!PyLong_CheckExact(v[kRowId]) || !PyFloat_CheckExact(v[kRowScore])) return false;
  v[kRowRanks] = json::dict_behind(v[kRowRanks]);
  v[kRowScores] = json::dict_behind(v[kRowScores]);
  v[kRowMetadata] = json::dict_behind(v[kRowMetadata]);
  return v[kRowRanks] != nullptr && v[kRowScores] != nullptr && v[kRowMetadata] != nullptr;
}

// One passage's row, or nullptr: with an error set on failure, without one when the passage
// holds something this reader leaves to the fallback (another class, an unset slot, a number
// of another type, a mapping that is not a dict or a view of one).
PyObject* json_row(const RowMaker& f, PyObject* p) {
  PyObject* v[kRowFields];
  if (!row_fields(f, p, v)) return nullptr;
  PyObject* owned[kRowFields] = {};
  owned[kRowScore] = finite_or_none(v[kRowScore]);
  owned[kRowRanks] = copy_numbers(v[kRowRanks], false);
  owned[kRowScores] = owned[kRowRanks] != nullptr ? copy_numbers(v[kRowScores], true) : nullptr;
  owned[kRowMetadata] = owned[kRowScores] != nullptr ? PyDict_Copy(v[kRowMetadata]) : nullptr;
  PyObject* row = owned[kRowMetadata] != nullptr ? PyDict_New() : nullptr;
  for (int i = 0; row != nullptr && i < kRowFields; ++i) {
    if (PyDict_SetItem(row, f.names[i], owned[i] != nullptr ? owned[i] : v[i]) != 0) Py_CLEAR(row);
  }
  for (PyObject* o : owned) Py_XDECREF(o);
  return row;
}

// rows(passages, fallback): a list of each passage's row, fallback(passage) for those
// json_row leaves. A METH_FASTCALL function: one call per answer.
PyObject* json_rows(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const auto* f = static_cast<const RowMaker*>(PyCapsule_GetPointer(self, kRowCapsule));
  if (f == nullptr) return nullptr;
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "json rows: expected (passages, fallback), got %zd arguments", nargs);
    return nullptr;
  }
  // A tuple (the same one when given one): the fallback, Python code, cannot change its length.
  PyObject* seq = PySequence_Tuple(args[0]);
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(seq);
  PyObject* out = PyList_New(n);
  for (Py_ssize_t i = 0; out != nullptr && i < n; ++i) {
    PyObject* p = PyTuple_GET_ITEM(seq, i);
    PyObject* row = json_row(*f, p);
    if (row == nullptr && !PyErr_Occurred()) row = PyObject_CallOneArg(args[1], p);
    if (row == nullptr) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, i, row);
  }
  Py_DECREF(seq);
  return out;
}

PyMethodDef json_rows_def = {"json_rows", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(json_rows)),
                             METH_FASTCALL, "rows(passages, fallback): each passage's JSON row, a list of dicts."};

// {str: int} (floats: {str: float}, non-finite as null) as JSON; false for another key or value type.
bool write_numbers(json::ByteWriter& out, PyObject* d, bool floats) {
  return json::write_dict_with(out, d, [floats](json::ByteWriter& o, PyObject* v) {
    if (!floats) return PyLong_CheckExact(v) && json::write_int(o, v);
    if (!PyFloat_CheckExact(v)) return false;
    json::write_float(o, PyFloat_AS_DOUBLE(v));
    return true;
  });
}

// One passage's row (json_row's dict) as JSON text; false where json_row or the JSON writer
// leaves it to the general path.
bool write_row(const RowMaker& f, PyObject* p, json::ByteWriter& out) {
  PyObject* v[kRowFields];
  if (!row_fields(f, p, v)) return false;
  out.push_back('{');
  for (int i = 0; i < kRowFields; ++i) {
    out.append(f.keys[i]);
    bool ok = true;
    switch (i) {
      case kRowScore: json::write_float(out, PyFloat_AS_DOUBLE(v[i])); break;
      case kRowRanks: ok = write_numbers(out, v[i], false); break;
      case kRowScores: ok = write_numbers(out, v[i], true); break;
      default: ok = json::write_value(out, v[i]);
    }
    if (!ok) return false;
  }
  out.push_back('}');
  return true;
}

// text(passages): the JSON text (bytes) of the list json_rows makes, written in one pass, or
// None when a passage holds anything json_rows leaves to its fallback or JSON's general path
// (the caller then renders the rows that way). A METH_O function: one call per answer.
PyObject* json_text(PyObject* self, PyObject* passages) {
  const auto* f = static_cast<const RowMaker*>(PyCapsule_GetPointer(self, kRowCapsule));
  if (f == nullptr) return nullptr;
  PyObject* seq = PySequence_Fast(passages, "json text: expected a sequence of passages");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject* const* items = PySequence_Fast_ITEMS(seq);
  PyObject* answer = json::written_bytes([&](json::ByteWriter& out) {
    return json::write_array_with(out, static_cast<size_t>(n),
                                  [&](json::ByteWriter& o, size_t i) { return write_row(*f, items[i], o); });
  });
  Py_DECREF(seq);
  return answer;
}

PyMethodDef json_text_def = {"json_text", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(json_text)),
                             METH_O, "text(passages): the JSON text of their rows (bytes), or None."};

void free_row_maker(PyObject* capsule) {
  auto* f = static_cast<RowMaker*>(PyCapsule_GetPointer(capsule, kRowCapsule));
  if (f == nullptr) return;
  Py_XDECREF(reinterpret_cast<PyObject*>(f->type));
  for (PyObject* o : f->names) Py_XDECREF(o);
  delete f;
}

py::object json_row_maker(const py::type& cls, const py::tuple& fields, const py::tuple& names, bool text) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (fields.size() != kRowFields || names.size() != kRowFields)
    throw py::value_error("fields and names: expected " + std::to_string(kRowFields) + " each, got " +
                          std::to_string(fields.size()) + " and " + std::to_string(names.size()));
  for (int i = 0; i < kRowFields; ++i)
    if (!PyUnicode_CheckExact(names[static_cast<size_t>(i)].ptr()))
      throw py::type_error("names[" + std::to_string(i) + "]: expected a str");
  auto f = std::make_unique<RowMaker>();
  f->offsets = slot_offsets(type, fields);
  for (int i = 0; i < kRowFields; ++i) {
    PyObject* name = Py_NewRef(names[static_cast<size_t>(i)].ptr());
    PyUnicode_InternInPlace(&name);
    f->names[i] = name;
    json::ByteWriter key;
    if (i > 0) key.push_back(',');
    if (!json::write_str(key, name)) {
      for (int j = 0; j <= i; ++j) Py_DECREF(f->names[j]);
      throw py::value_error("names[" + std::to_string(i) + "]: not UTF-8 (a lone surrogate)");
    }
    key.push_back(':');
    f->keys[i] = key.view();
  }
  f->type = reinterpret_cast<PyTypeObject*>(Py_NewRef(cls.ptr()));
  PyObject* capsule = PyCapsule_New(f.get(), kRowCapsule, free_row_maker);
  if (capsule == nullptr) {
    Py_DECREF(cls.ptr());
    for (PyObject* o : f->names) Py_DECREF(o);
    throw py::error_already_set();
  }
  f.release();
  PyObject* fn = PyCFunction_NewEx(text ? &json_text_def : &json_rows_def, capsule, nullptr);
  Py_DECREF(capsule);
  if (fn == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}

}  // namespace

void bind_passages(py::module_& m) {
  m.def("slot_filler", &slot_filler, py::arg("cls"), py::arg("fields"), py::arg("untrack") = false,
        "A function ``f(*values)`` making an instance of the slotted class ``cls`` (``object.__new__``),\n"
        "each value written to the slot of ``fields`` (its member descriptors) at its position, past\n"
        "``__init__`` and a frozen ``__setattr__``; with ``untrack``, not tracked by the cyclic garbage\n"
        "collector (for instances that can hold no cycle). TypeError when called with another number of values;\n"
        "at creation, TypeError for a field that is not a writable object slot, ValueError for a slot of\n"
        "another class.");
  m.def("json_row_maker", &json_row_maker, py::arg("cls"), py::arg("fields"), py::arg("names"), py::arg("text") = false,
        "A function ``rows(passages, fallback)`` -> a list with one dict per passage: ``names[i]`` ->\n"
        "the passage's slot ``fields[i]`` (11 member descriptors of the slotted class ``cls``, in row\n"
        "order: doc_id, id, title, text, score, ranks, scores, metadata, source, start, end), where\n"
        "``ranks``, ``scores`` and ``metadata`` (dicts or read-only views of dicts) are copied as dicts\n"
        "and a score that is NaN or infinite is None; every other value is kept as it is. A passage of\n"
        "another class, with an unset slot, an id that is not an int, a score or ``scores`` value that\n"
        "is not a float, a rank that is not an int, or another mapping type is answered by\n"
        "``fallback(passage)`` instead. With ``text``, a function ``text(passages)`` -> the JSON text of\n"
        "those rows (UTF-8 bytes, equal once parsed to orjson's), or None when any passage would take the\n"
        "fallback or holds a value other than an exact str, int (64-bit), float, bool, None, dict of str\n"
        "keys, list or tuple (nested at most 64 deep), or a str with a lone surrogate. At creation,\n"
        "ValueError for another count of fields or names, TypeError for a field that is not a writable\n"
        "object slot or a name that is not a str.");
  py::class_<ColumnsHandle>(m, "PassageColumnsView",
                            "A read-only view of the passage columns (arrays checked once, kept alive):\n"
                            "``arena`` (uint8), ``chunks`` (int64, n x 8), ``docs`` (int64, n x 6), ``keys``\n"
                            "(live chunk ids ascending, int64) and ``slots`` (their chunk rows, int64);\n"
                            "``cls`` (a slotted class), ``fields`` (its 13 slot descriptors in field order),\n"
                            "``empty`` and ``metadata_of`` are what :meth:`passages` builds with;\n"
                            "``n_keys``: the live entries of ``keys`` and ``slots`` (-1: all, as many of both).\n"
                            "TypeError for another dtype; ValueError for another shape.")
      .def(py::init<const py::handle&, const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                    py::type, const py::tuple&, py::object, py::function, py::ssize_t>(),
           py::arg("arena"), py::arg("chunks"), py::arg("docs"), py::arg("keys"), py::arg("slots"), py::arg("cls"),
           py::arg("fields"), py::arg("empty"), py::arg("metadata_of"), py::arg("n_keys") = -1)
      .def("set_keys", &ColumnsHandle::set_keys, py::arg("n"),
           "The first ``n`` entries of ``keys`` and ``slots`` are now the live ones (the arrays written in\n"
           "place by the caller, which holds its readers off meanwhile). ValueError past their length.")
      .def("rows_json", &ColumnsHandle::rows_json, py::arg("ids"), py::arg("fused"), py::arg("stage_scores"),
           py::arg("stage"),
           "The JSON text (UTF-8 bytes) of the list of result rows that the passages of\n"
           "``passages(ids, fused, stage_scores, stage, ...)`` render as in ``ragfind serve`` (``doc_id``,\n"
           "``chunk_id``, ``title``, ``text``, ``score``, ``ranks``, ``scores``, ``metadata``, ``source``,\n"
           "``start``, ``end``; NaN and infinite scores null), written from the columns without making the\n"
           "passages; None when a string of a row is not well-formed UTF-8, or its metadata holds a value\n"
           "other than JSON's own types (its passage then shows what the row cannot). Raises as\n"
           "``passages`` does.")
      .def("rows", &ColumnsHandle::rows, py::arg("ids"),
           "The rows ``(id, doc_id, text, title, start, end, metadata, context)`` of the live chunks\n"
           "``ids`` (int64 1-D), in the order given, absent ids skipped. ValueError for corrupt\n"
           "columns (an offset outside them).")
      .def("passages", &ColumnsHandle::passages, py::arg("ids"), py::arg("fused"), py::arg("stage_scores"),
           py::arg("stage"), py::arg("rank_views"), py::arg("highlights"), py::arg("texts") = py::none(),
           "The passages of one ranked list, a tuple: for each live chunk of ``ids`` (best first, absent ids\n"
           "skipped) an instance of ``cls`` (``object.__new__(cls)``) whose slots hold the row's\n"
           "fields, ``score`` = ``fused[i]`` (a list of floats, shared, or an array; at least as long as\n"
           "``ids``), ``ranks`` =\n"
           "``rank_views[i]`` (a read-only ``{stage: i + 1}`` past their end), ``scores`` = read-only\n"
           "``{stage: stage_scores[i], 'fused': fused[i]}``, ``highlights`` = ``highlights``, and\n"
           "``metadata``/``source``:\n"
           "``empty`` and the document id for the JSON ``{}``, else ``metadata_of(json, doc_id)``\n"
           "-> ``(metadata, source)``. ``texts``: a list each passage's text is appended to, or None.\n"
           "ValueError for corrupt columns.");
}

}  // namespace ragfind::bindings
