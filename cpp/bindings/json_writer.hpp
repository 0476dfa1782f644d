// Python values written as compact JSON text, the answer orjson gives for the same values (equal
// once parsed): str, int, float, bool, None, dict with str keys, list and tuple, exact types only.
// Anything else (a subclass, a NumPy number, an int past 64 bits, a lone surrogate, nesting past
// kMaxDepth) makes a write return false with no Python error set, and the caller renders that
// value its slower general way, which also words any error.
#pragma once

#include <Python.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ragfind/text/json_string.hpp"

namespace ragfind::bindings::json {

using text::json::ByteWriter;

constexpr int kMaxDepth = 64;

// An exact str, quoted; false for a lone surrogate (not UTF-8: orjson refuses it too).
inline bool write_str(ByteWriter& out, PyObject* s) {
  const auto n = static_cast<size_t>(PyUnicode_GET_LENGTH(s));
  const void* data = PyUnicode_DATA(s);
  out.push_back('"');
  bool ok;
  switch (PyUnicode_KIND(s)) {
    case PyUnicode_1BYTE_KIND: ok = text::json::write_units(out, static_cast<const Py_UCS1*>(data), n); break;
    case PyUnicode_2BYTE_KIND: ok = text::json::write_units(out, static_cast<const Py_UCS2*>(data), n); break;
    default: ok = text::json::write_units(out, static_cast<const Py_UCS4*>(data), n);
  }
  if (!ok) return false;
  out.push_back('"');
  return true;
}

inline void write_int64(ByteWriter& out, long long x) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append({buf, static_cast<size_t>(r.ptr - buf)});
}

// An exact int; false past 64 bits (signed), left to the general path.
inline bool write_int(ByteWriter& out, PyObject* v) {
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow != 0) return false;
  write_int64(out, x);
  return true;
}

// A float: the shortest text that reads back as the same double (as orjson writes it), with
// ".0" when that text would read as an integer; null for NaN and the infinities (as orjson).
inline void write_float(ByteWriter& out, double x) {
  if (!std::isfinite(x)) {
    out.append("null");
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append({buf, static_cast<size_t>(r.ptr - buf)});
  if (std::memchr(buf, '.', static_cast<size_t>(r.ptr - buf)) == nullptr &&
      std::memchr(buf, 'e', static_cast<size_t>(r.ptr - buf)) == nullptr)
    out.append(".0");
}

inline bool write_value(ByteWriter& out, PyObject* v, int depth = 0);

// An exact dict of str keys, in its order, each value written by write(out, value) -> bool.
template <class Write>
bool write_dict_with(ByteWriter& out, PyObject* d, Write&& write) {
  out.push_back('{');
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  bool first = true;
  while (PyDict_Next(d, &pos, &key, &value)) {
    if (!PyUnicode_CheckExact(key)) return false;
    if (!first) out.push_back(',');
    first = false;
    if (!write_str(out, key)) return false;
    out.push_back(':');
    if (!write(out, value)) return false;
  }
  out.push_back('}');
  return true;
}

// An array of n elements, element i written by write(out, i) -> bool.
template <class Write>
bool write_array_with(ByteWriter& out, size_t n, Write&& write) {
  out.push_back('[');
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back(',');
    if (!write(out, i)) return false;
  }
  out.push_back(']');
  return true;
}

// An exact dict of str keys, in its order.
inline bool write_dict(ByteWriter& out, PyObject* d, int depth) {
  if (depth >= kMaxDepth) return false;
  return write_dict_with(out, d, [depth](ByteWriter& o, PyObject* v) { return write_value(o, v, depth + 1); });
}

inline bool write_items(ByteWriter& out, PyObject* const* items, Py_ssize_t n, int depth) {
  if (depth >= kMaxDepth) return false;
  return write_array_with(out, static_cast<size_t>(n),
                          [items, depth](ByteWriter& o, size_t i) { return write_value(o, items[i], depth + 1); });
}

inline bool write_value(ByteWriter& out, PyObject* v, int depth) {
  if (PyUnicode_CheckExact(v)) return write_str(out, v);
  if (v == Py_None) {
    out.append("null");
    return true;
  }
  if (v == Py_True || v == Py_False) {
    out.append(v == Py_True ? "true" : "false");
    return true;
  }
  if (PyLong_CheckExact(v)) return write_int(out, v);
  if (PyFloat_CheckExact(v)) {
    write_float(out, PyFloat_AS_DOUBLE(v));
    return true;
  }
  if (PyDict_CheckExact(v)) return write_dict(out, v, depth);
  if (PyList_CheckExact(v)) return write_items(out, PySequence_Fast_ITEMS(v), PyList_GET_SIZE(v), depth);
  if (PyTuple_CheckExact(v)) return write_items(out, PySequence_Fast_ITEMS(v), PyTuple_GET_SIZE(v), depth);
  return false;
}

// Whether a mappingproxy holds its mapping in the word after the object header (true of every
// CPython so far; checked once on a real one, else views are left to the general path).
inline bool proxy_layout_holds() {
  PyObject* d = PyDict_New();
  PyObject* proxy = d != nullptr ? PyDictProxy_New(d) : nullptr;
  const bool holds = proxy != nullptr && Py_TYPE(proxy) == &PyDictProxy_Type &&
                     *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(proxy) + sizeof(PyObject)) == d;
  Py_XDECREF(proxy);
  Py_XDECREF(d);
  PyErr_Clear();
  return holds;
}

// The exact dict m is, or that a read-only view of it (types.MappingProxyType) shows, borrowed;
// nullptr for anything else.
inline PyObject* dict_behind(PyObject* m) {
  if (PyDict_CheckExact(m)) return m;
  static const bool layout = proxy_layout_holds();
  if (!layout || Py_TYPE(m) != &PyDictProxy_Type) return nullptr;
  PyObject* inner = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(m) + sizeof(PyObject));
  return PyDict_CheckExact(inner) ? inner : nullptr;
}

// What write(ByteWriter&) -> bool writes, as bytes, or None when it returns false; nullptr with
// MemoryError set when out of memory. The writer is the thread's own (its capacity kept from
// call to call, up to 4 MiB), or a new one when the thread is already inside such a call.
template <class Write>
PyObject* written_bytes(Write&& write) {
  thread_local ByteWriter kept;
  thread_local bool busy = false;
  ByteWriter fresh;
  ByteWriter& out = busy ? fresh : kept;
  const bool outer = !busy;
  busy = true;
  struct Done {
    bool outer;
    ~Done() {
      if (outer) busy = false;
    }
  } done{outer};
  out.clear();
  bool ok;
  try {
    ok = write(out);
  } catch (const std::bad_alloc&) { return PyErr_NoMemory(); }
  PyObject* text = ok ? PyBytes_FromStringAndSize(out.view().data(), static_cast<Py_ssize_t>(out.view().size()))
                      : Py_NewRef(Py_None);
  if (out.capacity() > (size_t{1} << 22)) out.release();
  return text;
}

}  // namespace ragfind::bindings::json
