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

// An exact int; false past 64 bits (signed), left to the general path.
inline bool write_int(ByteWriter& out, PyObject* v) {
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow != 0) return false;
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append({buf, static_cast<size_t>(r.ptr - buf)});
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

// An exact dict of str keys, in its order.
inline bool write_dict(ByteWriter& out, PyObject* d, int depth) {
  if (depth >= kMaxDepth) return false;
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
    if (!write_value(out, value, depth + 1)) return false;
  }
  out.push_back('}');
  return true;
}

inline bool write_items(ByteWriter& out, PyObject* const* items, Py_ssize_t n, int depth) {
  if (depth >= kMaxDepth) return false;
  out.push_back('[');
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back(',');
    if (!write_value(out, items[i], depth + 1)) return false;
  }
  out.push_back(']');
  return true;
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

}  // namespace ragfind::bindings::json
