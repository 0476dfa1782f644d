// ragfind._core.MetadataIndex: the metadata (payload) index behind Retriever filters. Values and
// filter trees are read while holding the GIL (copied into C++ storage); updates and filter
// evaluation run without it, under the index's reader/writer lock.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "ragfind/common/paged_bits.hpp"
#include "ragfind/common/rw_mutex.hpp"
#include "ragfind/metadata/index.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

namespace {

using metadata::Kind;
using metadata::MetadataIndex;
using metadata::Node;
using metadata::Value;

// Metadata keys live under this prefix; the caller's extra (built-in) fields name their own.
constexpr const char* kMetaPrefix = "m:";

std::string utf8(py::handle s, const char* what) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  if (!p) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + ": a str that is not valid Unicode (a lone surrogate?)");
  }
  return std::string(p, static_cast<std::size_t>(n));
}

// A value with its string owned (the Python object may change once the GIL is released).
struct Owned {
  Kind kind = Kind::Null;
  double num = 0.0;
  bool flag = false;
  std::string str;
  Value view() const { return Value{kind, num, flag, str}; }
};

Owned owned(py::handle v) {
  Owned o;
  PyObject* p = v.ptr();
  if (p == Py_None) {
    o.kind = Kind::Null;
  } else if (PyBool_Check(p)) {
    o.kind = Kind::Bool;
    o.flag = p == Py_True;
  } else if (PyLong_Check(p)) {
    o.num = PyLong_AsDouble(p);
    if (o.num == -1.0 && PyErr_Occurred()) {  // beyond a double: it can only be present
      PyErr_Clear();
      o.kind = Kind::Other;
    } else {
      o.kind = Kind::Num;
    }
  } else if (PyFloat_Check(p)) {
    o.kind = Kind::Num;
    o.num = PyFloat_AS_DOUBLE(p);
  } else if (PyUnicode_Check(p)) {
    o.kind = Kind::Str;
    o.str = utf8(v, "metadata");
  } else {
    o.kind = Kind::Other;
  }
  return o;
}

struct Entry {
  std::uint32_t row;  // position in the batch
  std::string field;
  Owned value;
};

// The filter tree from its tuple form (see filters.py: ("eq", field, value), ("and", [..]), ...).
Node parse_node(py::handle t, int depth) {
  if (depth > 10000) throw py::value_error("filters: nested too deep");
  if (!PyTuple_Check(t.ptr()) || PyTuple_GET_SIZE(t.ptr()) < 1)
    throw py::type_error("filter node: expected a tuple (op, ...)");
  auto item = [&](Py_ssize_t i) -> py::handle {
    if (i >= PyTuple_GET_SIZE(t.ptr())) throw py::value_error("filter node: too few items");
    return PyTuple_GET_ITEM(t.ptr(), i);
  };
  const std::string op = utf8(item(0), "filter node");
  Node n;
  auto children = [&](py::handle seq) {
    for (py::handle c : py::iter(seq)) n.children.push_back(parse_node(c, depth + 1));
  };
  if (op == "all") {
    n.op = Node::Op::All;
  } else if (op == "none") {
    n.op = Node::Op::Nothing;
  } else if (op == "and" || op == "or") {
    n.op = op == "and" ? Node::Op::And : Node::Op::Or;
    children(item(1));
  } else if (op == "not") {
    n.op = Node::Op::Not;
    n.children.push_back(parse_node(item(1), depth + 1));
  } else if (op == "present" || op == "valued") {
    n.op = op == "present" ? Node::Op::Present : Node::Op::Valued;
    n.field = utf8(item(1), "filter field");
  } else if (op == "eq") {
    n.op = Node::Op::Eq;
    n.field = utf8(item(1), "filter field");
    Owned o = owned(item(2));
    if (o.kind != Kind::Str && o.kind != Kind::Num && o.kind != Kind::Bool)
      throw py::type_error("filter node: eq takes a str, number or bool");
    n.text = std::move(o.str);
    n.value = Value{o.kind, o.num, o.flag, {}};
  } else if (op == "range") {
    n.op = Node::Op::Range;
    n.field = utf8(item(1), "filter field");
    n.value.kind = Kind::Null;
    for (int side = 0; side < 2; ++side) {
      py::handle b = item(2 + 2 * side);
      if (b.is_none()) continue;
      Owned o = owned(b);
      if (o.kind != Kind::Str && o.kind != Kind::Num)
        throw py::type_error("filter node: range takes str or number bounds");
      if (n.value.kind != Kind::Null && n.value.kind != o.kind)
        throw py::type_error("filter node: range bounds of two kinds");
      n.value.kind = o.kind;
      const bool inclusive = PyObject_IsTrue(item(3 + 2 * side).ptr()) == 1;
      if (side == 0) {
        n.has_lo = true;
        n.lo_inclusive = inclusive;
        n.lo = o.num;
        n.text = std::move(o.str);
      } else {
        n.has_hi = true;
        n.hi_inclusive = inclusive;
        n.hi = o.num;
        n.text_hi = std::move(o.str);
      }
    }
    if (n.value.kind == Kind::Null) n.op = Node::Op::Valued;  // no bounds: any value
  } else {
    throw py::value_error("filter node: unknown op '" + op + "'");
  }
  return n;
}

// Points each Eq node's string operand at its own text (after the tree stopped moving).
void bind_views(Node& n) {
  if (n.op == Node::Op::Eq && n.value.kind == Kind::Str) n.value.str = n.text;
  for (Node& c : n.children) bind_views(c);
}

py::array_t<std::int64_t> to_array(std::vector<std::int64_t>&& v) {
  auto* heap = new std::vector<std::int64_t>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<std::int64_t>*>(p); });
  return py::array_t<std::int64_t>({static_cast<py::ssize_t>(heap->size())}, {sizeof(std::int64_t)}, heap->data(),
                                   owner);
}

// f(i, w) for each 64 ids first + i .. first + i + 63 of [first, first + n) with any set, w their
// bits (bit j: id first + i + j): ids below 0 or past the bitmap are clear.
template <class F>
void for_chunks(const common::PagedBits& b, std::int64_t first, std::int64_t n, F&& f) {
  for (std::int64_t i = first < 0 ? -first : 0; i < n; i += 64) {
    const auto id = static_cast<std::size_t>(first + i);
    if (id >= b.size()) break;
    std::uint64_t w = b.bits_at(id);
    if (n - i < 64) w &= (std::uint64_t{1} << (n - i)) - 1;
    if (w) f(i, w);
  }
}

// A filter compiled against the index: its tree and the live rows it matched at a generation.
// Never changed once made (refresh() makes another), so its rows are read without a lock.
struct Selection {
  std::shared_ptr<const Node> node;  // its string views point into its own text
  common::PagedBits rows;            // a refresh shares the pages no write touched
  std::uint64_t generation = 0;
  std::size_t count = 0;
};

class MetadataCore {
 public:
  MetadataCore() = default;
  explicit MetadataCore(MetadataIndex&& ix) : index_(std::move(ix)) {}

  // Adds one row per chunk id: its metadata dict (None: no keys) and the extra fields' values.
  void add(const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& chunk_ids,
           const py::list& metadata, const py::dict& extra) {
    const auto n = static_cast<std::size_t>(chunk_ids.size());
    if (static_cast<std::size_t>(metadata.size()) != n)
      throw py::value_error("metadata: " + std::to_string(metadata.size()) + " entries for " + std::to_string(n) +
                            " chunk ids");
    std::vector<std::int64_t> ids(chunk_ids.data(), chunk_ids.data() + n);
    std::vector<Entry> entries;
    for (std::size_t i = 0; i < n; ++i) {
      py::handle md = metadata[i];
      if (md.is_none()) continue;
      if (!PyDict_Check(md.ptr())) throw py::type_error("metadata[" + std::to_string(i) + "]: expected a dict");
      PyObject *key, *value;
      Py_ssize_t pos = 0;
      while (PyDict_Next(md.ptr(), &pos, &key, &value)) {
        if (!PyUnicode_Check(key)) throw py::type_error("metadata keys must be str");
        entries.push_back({static_cast<std::uint32_t>(i), kMetaPrefix + utf8(key, "metadata key"), owned(value)});
      }
    }
    for (auto [name, values] : extra) {
      const std::string field = utf8(name, "field name");
      py::sequence seq = py::reinterpret_borrow<py::sequence>(values);
      if (static_cast<std::size_t>(seq.size()) != n)
        throw py::value_error("extra field '" + field + "': one value per chunk id expected");
      for (std::size_t i = 0; i < n; ++i) entries.push_back({static_cast<std::uint32_t>(i), field, owned(seq[i])});
    }
    std::vector<std::int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    if (twice != sorted.end()) throw py::value_error("chunk id " + std::to_string(*twice) + " is repeated");
    py::gil_scoped_release release;
    std::unique_lock<common::WriterPreferringSharedMutex> lock(mu_);
    for (std::int64_t id : ids)
      if (index_.contains(id)) throw py::value_error("chunk id " + std::to_string(id) + " is already indexed");
    std::vector<std::uint32_t> rows(n);
    for (std::size_t i = 0; i < n; ++i) rows[i] = index_.append_row(ids[i]);
    for (const Entry& e : entries) index_.put(rows[e.row], e.field, e.value.view());
  }

  std::size_t remove(const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& chunk_ids) {
    std::vector<std::int64_t> ids(chunk_ids.data(), chunk_ids.data() + chunk_ids.size());
    py::gil_scoped_release release;
    std::unique_lock<common::WriterPreferringSharedMutex> lock(mu_);
    return index_.remove(ids);
  }

  // The chunk ids the filter tree allows, ascending.
  py::array_t<std::int64_t> select(const py::tuple& tree) {
    Node node = parse_node(tree, 0);
    bind_views(node);
    std::vector<std::int64_t> ids;
    {
      py::gil_scoped_release release;
      std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
      ids = index_.ids_of(index_.evaluate(node));
    }
    return to_array(std::move(ids));
  }

  // The filter tree evaluated, kept with its tree so that refresh() can patch it after writes.
  std::shared_ptr<Selection> compile(const py::tuple& tree) {
    auto node = std::make_shared<Node>(parse_node(tree, 0));
    bind_views(*node);
    auto sel = std::make_shared<Selection>();
    sel->node = std::move(node);
    py::gil_scoped_release release;
    std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
    const metadata::Bitmap rows = index_.evaluate(*sel->node);
    sel->rows = rows.paged();
    sel->generation = index_.generation();
    sel->count = rows.count();
    return sel;
  }

  // `sel` brought up to date: itself when nothing was written since, else its rows patched
  // (only the rows written since are tested again; see MetadataIndex::patched).
  std::shared_ptr<Selection> refresh(const std::shared_ptr<Selection>& sel) {
    if (!sel) throw py::type_error("refresh: expected a MetadataSelection");
    py::gil_scoped_release release;
    std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
    check_own(*sel);
    if (sel->generation == index_.generation()) return sel;
    auto out = std::make_shared<Selection>();
    out->node = sel->node;
    out->count = sel->count;
    out->rows = index_.patched(*sel->node, sel->rows, sel->generation, &out->count);
    out->generation = index_.generation();
    return out;
  }

  // The chunk ids of a selection's rows, ascending (rows keep their chunk id for good).
  py::array_t<std::int64_t> selection_ids(const std::shared_ptr<Selection>& sel) const {
    if (!sel) throw py::type_error("selection_ids: expected a MetadataSelection");
    std::vector<std::int64_t> ids;
    {
      py::gil_scoped_release release;
      std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
      check_own(*sel);
      ids = index_.ids_of(sel->rows);
    }
    return to_array(std::move(ids));
  }

  // A selection's rows as an IdBitmap over chunk ids (bit i: chunk id i), sharing the
  // selection's pages; None when rows are not chunk ids.
  py::object id_words(const std::shared_ptr<Selection>& sel) const {
    if (!sel) throw py::type_error("id_words: expected a MetadataSelection");
    {
      std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
      if (!index_.ids_are_rows()) return py::none();
    }
    return py::cast(std::make_shared<common::PagedBits>(sel->rows));
  }

  std::uint64_t generation() const {
    std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
    return index_.generation();
  }

  py::array_t<std::int64_t> live_ids() const {
    std::vector<std::int64_t> ids;
    {
      py::gil_scoped_release release;
      std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
      ids = index_.live_ids();
    }
    return to_array(std::move(ids));
  }

  std::uint64_t kinds_version() const {
    std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
    return index_.kinds_version();
  }

  int kinds(const std::string& field) const {
    std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
    return index_.kinds(field);
  }

  std::vector<std::string> fields() const {
    std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
    return index_.fields();
  }

  std::size_t size() const {
    std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
    return index_.size();
  }

  py::bytes dump() const {
    std::string out;
    {
      py::gil_scoped_release release;
      std::shared_lock<common::WriterPreferringSharedMutex> lock(mu_);
      out = index_.dump();
    }
    return py::bytes(out);
  }

  static std::unique_ptr<MetadataCore> load(const py::bytes& data) {
    std::string bytes = data;
    py::gil_scoped_release release;
    try {
      return std::make_unique<MetadataCore>(MetadataIndex::load(bytes));
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());  // raised once the GIL is back
    }
  }

 private:
  // A selection made by another index may name rows this one lacks (checked with the lock held).
  void check_own(const Selection& sel) const {
    if (sel.rows.size() > index_.rows() || sel.generation > index_.generation())
      throw std::invalid_argument("selection: made by another MetadataIndex");
  }

  MetadataIndex index_;
  mutable common::WriterPreferringSharedMutex mu_;
};

}  // namespace

void bind_metadata(py::module_& m) {
  py::class_<common::PagedBits, std::shared_ptr<common::PagedBits>>(
      m, "IdBitmap",
      "A bitmap over int ids (bit i: id i) in pages shared with the MetadataSelection it came from; "
      "the indexes compile it into their allowed sets. Read-only.")
      .def("__len__", &common::PagedBits::size, "Bits covered.")
      .def(
          "words",
          [](const common::PagedBits& b) {
            std::vector<std::uint64_t> w = b.words();
            return py::array_t<std::uint64_t>(static_cast<py::ssize_t>(w.size()), w.data());
          },
          "The bits as a uint64 array (bit i of word i // 64), a copy.")
      .def(
          "rows",
          [](const common::PagedBits& b, std::int64_t first, std::int64_t n) {
            std::vector<std::int64_t> out;
            for_chunks(b, first, n, [&](std::int64_t at, std::uint64_t w) {
              for (; w; w &= w - 1) out.push_back(at + __builtin_ctzll(w));
            });
            return py::array_t<std::int64_t>(static_cast<py::ssize_t>(out.size()), out.data());
          },
          py::arg("first"), py::arg("n"),
          "Ascending i in [0, n) whose id first + i is set: the rows of an index whose row i holds id "
          "first + i.")
      .def(
          "mask",
          [](const common::PagedBits& b, std::int64_t first, std::int64_t n) {
            py::array_t<std::uint8_t> out(n < 0 ? 0 : static_cast<py::ssize_t>(n));
            std::uint8_t* m = out.mutable_data();
            std::fill(m, m + out.size(), 0);
            for_chunks(b, first, n, [&](std::int64_t at, std::uint64_t w) {
              for (; w; w &= w - 1) m[at + __builtin_ctzll(w)] = 1;
            });
            return out;
          },
          py::arg("first"), py::arg("n"), "uint8 per i in [0, n): 1 when id first + i is set.")
      .def(
          "count",
          [](const common::PagedBits& b, std::int64_t first, std::int64_t n) {
            std::size_t c = 0;
            for_chunks(b, first, n, [&](std::int64_t, std::uint64_t w) { c += __builtin_popcountll(w); });
            return c;
          },
          py::arg("first"), py::arg("n"), "How many ids of [first, first + n) are set.");

  py::class_<Selection, std::shared_ptr<Selection>>(
      m, "MetadataSelection",
      "A filter compiled by MetadataIndex.compile: its tree and the chunks it allowed at one index "
      "generation. Made by MetadataIndex only; MetadataIndex.refresh brings it up to date.")
      .def("__len__", [](const Selection& s) { return s.count; })
      .def_readonly("generation", &Selection::generation);

  py::class_<MetadataCore>(m, "MetadataIndex",
                           "Metadata (payload) index: chunk ids by field value, for Retriever filters.")
      .def(py::init<>())
      .def("add", &MetadataCore::add, py::arg("chunk_ids"), py::arg("metadata"), py::arg("extra"),
           "Adds one row per chunk id: its metadata dict (keys stored under 'm:' + key) and the extra "
           "fields' values (name -> one value per chunk). ValueError for an id already indexed.")
      .def("remove", &MetadataCore::remove, py::arg("chunk_ids"),
           "Removes these chunk ids (unknown ones are ignored); returns how many were removed.")
      .def("select", &MetadataCore::select, py::arg("tree"),
           "The chunk ids (int64, ascending) the filter tree allows (see ragfind.pipeline.filters).")
      .def("compile", &MetadataCore::compile, py::arg("tree"),
           "The filter tree evaluated, as a MetadataSelection that refresh() keeps up to date.")
      .def("refresh", &MetadataCore::refresh, py::arg("selection"),
           "The selection at the index's current generation: itself when nothing was written since, "
           "else a new one with only the rows written since tested again.")
      .def("selection_ids", &MetadataCore::selection_ids, py::arg("selection"),
           "The chunk ids (int64, ascending) of a selection.")
      .def("id_words", &MetadataCore::id_words, py::arg("selection"),
           "A selection as an IdBitmap over chunk ids (bit i: chunk id i), sharing its pages; None "
           "unless every row's chunk id is its row number.")
      .def_property_readonly("generation", &MetadataCore::generation, "Incremented by every chunk added or removed.")
      .def("live_ids", &MetadataCore::live_ids, "Every indexed chunk id, ascending.")
      .def("kinds", &MetadataCore::kinds, py::arg("field"),
           "Bit 1 << k for each kind k of value the field has held (0 null, 1 str, 2 number, 3 bool, "
           "4 other); 0 for an unknown field.")
      .def_property_readonly("kinds_version", &MetadataCore::kinds_version,
                             "Incremented whenever a field holds a kind of value it never held: while it "
                             "stays the same, so does every field's kinds().")
      .def("fields", &MetadataCore::fields, "Field names ever indexed, sorted.")
      .def("__len__", &MetadataCore::size)
      .def("dump", &MetadataCore::dump, "The index as bytes (MetadataIndex.load reads them).")
      .def_static("load", &MetadataCore::load, py::arg("data"),
                  "An index from dump() bytes; ValueError naming what is malformed.");
}

}  // namespace ragfind::bindings
