// Bindings for the analyzer, inverted index and BM25.
//
// Inputs are validated while holding the GIL; the work then runs with the GIL released. The
// stemmer (PyStemmer) and a user tokenizer are Python callables: the stemmer callback
// re-acquires the GIL itself, so no lock of ours is ever awaited while holding the GIL (lock
// order: GIL released -> index lock -> analyzer lock -> GIL for the stemmer).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <unordered_set>

#include "bindings.hpp"
#include "ragfind/bm25/index_io.hpp"
#include "ragfind/bm25/store.hpp"
#include "ragfind/text/analyzer.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

namespace {

using namespace ragfind::bm25;
using namespace ragfind::text;

// A Python object whose reference is dropped under the GIL, wherever the holder dies.
struct GilHeld {
  py::object obj;
  explicit GilHeld(py::object o) : obj(std::move(o)) {}
  ~GilHeld() {
    py::gil_scoped_acquire gil;
    obj = py::object();
  }
};

// An id of the wrong kind: bm25::IdError, raised as ragfind.errors.IdKindError by the
// translator registered in bind_bm25 (the classes live in Python, so they are looked up when
// raised, with the GIL held).
[[noreturn]] void id_kind(const std::string& msg) { throw IdError(IdError::Kind::WrongKind, msg); }

// Sets the Python error of ragfind.errors' class `cls` (the GIL is held in a translator).
void raise_contract_error(const char* cls, const char* msg) {
  try {
    py::object c = py::module_::import("ragfind.errors").attr(cls);
    PyErr_SetString(c.ptr(), msg);
  } catch (py::error_already_set& err) { err.restore(); }
}

// UTF-8 of a str (lone surrogates, which UTF-8 cannot encode, become '?') or, where allowed
// (Analyzer.analyze), of bytes (kept as is; invalid sequences are separators for the
// tokenizer). spill keeps converted copies.
std::string_view text_view(py::handle h, std::string& spill, const std::string& what, bool allow_bytes = false) {
  PyObject* o = h.ptr();
  if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(o, &n);
    if (p) return std::string_view(p, static_cast<std::size_t>(n));
    PyErr_Clear();
    PyObject* b = PyUnicode_AsEncodedString(o, "utf-8", "replace");
    if (!b) throw py::error_already_set();
    spill.assign(PyBytes_AS_STRING(b), static_cast<std::size_t>(PyBytes_GET_SIZE(b)));
    Py_DECREF(b);
    return spill;
  }
  if (allow_bytes && PyBytes_Check(o))
    return std::string_view(PyBytes_AS_STRING(o), static_cast<std::size_t>(PyBytes_GET_SIZE(o)));
  throw py::type_error(what + (allow_bytes ? ": expected str or bytes, got " : ": expected str, got ") + type_name(h));
}

std::string to_utf8(py::handle h, const std::string& what) {
  std::string spill;
  std::string_view v = text_view(h, spill, what);
  return std::string(v);
}

py::str to_pystr(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// ---------------------------------------------------------------------------------------------
// Analyzer

class PyAnalyzer {
 public:
  PyAnalyzer(bool lowercase, const std::vector<std::string>& stopwords, py::object stem_words, bool split_identifiers,
             py::object tokenizer, bool cjk_bigrams, bool symbol_letters, bool caps_text_symbols, bool fold_accents)
      : tokenizer_(tokenizer.is_none() ? nullptr : std::make_shared<GilHeld>(tokenizer)) {
    if (!tokenizer.is_none() && !PyCallable_Check(tokenizer.ptr()))
      throw py::type_error("tokenizer: expected a callable str -> list[str] or None, got " + type_name(tokenizer));
    StemBatchFn stem;
    if (!stem_words.is_none()) {
      if (!PyCallable_Check(stem_words.ptr()))
        throw py::type_error("stem_words: expected a callable list[str] -> list[str], got " + type_name(stem_words));
      auto fn = std::make_shared<GilHeld>(stem_words);
      stem = [fn](const std::vector<std::string_view>& words, std::vector<std::string>& out) {
        py::gil_scoped_acquire gil;
        py::list in(words.size());
        for (std::size_t i = 0; i < words.size(); ++i) in[i] = to_pystr(words[i]);
        py::object res = fn->obj(in);
        py::sequence seq = res.cast<py::sequence>();
        if (seq.size() != words.size()) throw std::runtime_error("stemmer returned a different number of words");
        out.resize(words.size());
        for (std::size_t i = 0; i < words.size(); ++i) out[i] = to_utf8(seq[i], "stemmer output");
      };
    }
    TokenizerOptions opt;
    opt.lowercase = lowercase;
    opt.split_identifiers = split_identifiers;
    opt.cjk_bigrams = cjk_bigrams;
    opt.symbol_letters = symbol_letters;
    opt.caps_text_symbols = caps_text_symbols;
    opt.fold_accents = fold_accents;
    core_ = std::make_shared<Analyzer>(opt, stopwords, std::move(stem));
  }

  Analyzer& core() { return *core_; }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }

  // Calls the user tokenizer (GIL held): the tokens of one text.
  std::vector<std::string> user_tokens(py::handle text, const std::string& what) {
    py::object res = tokenizer_->obj(text);
    if (PyUnicode_Check(res.ptr()) || PyBytes_Check(res.ptr()))
      throw py::type_error("tokenizer must return a list of str, got " + type_name(res) + " for " + what);
    std::vector<std::string> toks;
    for (py::handle t : py::iter(res)) {
      if (!PyUnicode_Check(t.ptr()))
        throw py::type_error("tokenizer must return a list of str; it returned a " + type_name(t) + " item for " +
                             what);
      toks.push_back(to_utf8(t, what));
    }
    return toks;
  }

  // Prepared input for analysis: either views of the texts or user-tokenized lists.
  struct Input {
    std::vector<std::string_view> views;
    std::vector<std::string> spill;
    std::vector<std::vector<std::string>> tokens;
  };

  void prepare(const py::sequence& texts, Input& in, const char* arg, bool allow_bytes = false) {
    const std::size_t n = texts.size();
    if (has_tokenizer()) {
      in.tokens.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        py::object t = texts[i];
        const std::string what = std::string(arg) + "[" + std::to_string(i) + "]";
        if (!PyUnicode_Check(t.ptr())) throw py::type_error(what + ": expected str, got " + type_name(t));
        in.tokens[i] = user_tokens(t, what);
      }
    } else {
      in.views.resize(n);
      in.spill.resize(n);
      for (std::size_t i = 0; i < n; ++i)
        in.views[i] =
            text_view(texts[i], in.spill[i],
                      allow_bytes ? std::string(arg) : std::string(arg) + "[" + std::to_string(i) + "]", allow_bytes);
    }
  }

  // GIL released. Analyzes documents [begin, end) of `in` into stream.
  void analyze_docs(const Input& in, std::size_t begin, std::size_t end, TokenStream& stream) {
    if (has_tokenizer()) {
      std::vector<std::vector<std::string_view>> docs(end - begin);
      for (std::size_t i = begin; i < end; ++i) docs[i - begin].assign(in.tokens[i].begin(), in.tokens[i].end());
      core_->analyze_token_lists(docs, stream);
    } else {
      std::vector<std::string_view> docs(in.views.begin() + begin, in.views.begin() + end);
      core_->analyze_texts(docs, stream);
    }
  }

  // GIL released. Query-side analysis of item i of `in`.
  void analyze_query(const Input& in, std::size_t i, std::vector<std::string>& stems) const {
    if (!in.tokens.empty() || (in.views.empty() && has_tokenizer())) {
      std::vector<std::string_view> toks(in.tokens[i].begin(), in.tokens[i].end());
      core_->analyze_query_tokens(toks, stems);
    } else {
      core_->analyze_query(in.views[i], stems);
    }
  }

  py::list analyze(py::handle text) {
    py::list one;
    one.append(text);
    Input in;
    prepare(one, in, "text", true);
    std::vector<std::string> stems;
    {
      py::gil_scoped_release release;
      analyze_query(in, 0, stems);
    }
    py::list out(stems.size());
    for (std::size_t i = 0; i < stems.size(); ++i) out[i] = to_pystr(stems[i]);
    return out;
  }

  // (stem, begin, end, counted) per analyzed token, offsets in code points of text.
  py::list analyze_offsets(py::handle text) {
    if (has_tokenizer()) throw py::value_error("analyze_offsets: not available with a custom tokenizer");
    std::string spill;
    std::string_view view = text_view(text, spill, "text");
    std::vector<Analyzer::Located> located;
    {
      py::gil_scoped_release release;
      core_->analyze_with_offsets(view, located);
    }
    py::list out(located.size());
    for (std::size_t i = 0; i < located.size(); ++i)
      out[i] = py::make_tuple(to_pystr(located[i].stem), located[i].begin, located[i].end, located[i].counted);
    return out;
  }

  // Per text, the (begin, end) code-point offsets of the tokens whose stem is one of terms: the
  // highlights of a whole result list in one call, building Python objects only for matches.
  py::list match_offsets(const py::list& texts, const std::vector<std::string>& terms) {
    if (has_tokenizer()) throw py::value_error("match_offsets: not available with a custom tokenizer");
    const std::size_t n = texts.size();
    std::vector<std::string> spill(n);
    std::vector<std::string_view> views(n);
    for (std::size_t i = 0; i < n; ++i) views[i] = text_view(texts[i], spill[i], "texts[" + std::to_string(i) + "]");
    const std::unordered_set<std::string_view> wanted(terms.begin(), terms.end());
    std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> spans(n);
    {
      py::gil_scoped_release release;
      std::vector<Analyzer::Located> located;
      for (std::size_t i = 0; i < n; ++i) {
        located.clear();
        core_->analyze_with_offsets(views[i], located);
        for (const auto& t : located)
          if (wanted.count(std::string_view(t.stem))) spans[i].emplace_back(t.begin, t.end);
      }
    }
    py::list out(n);
    for (std::size_t i = 0; i < n; ++i) {
      py::list one(spans[i].size());
      for (std::size_t j = 0; j < spans[i].size(); ++j) one[j] = py::make_tuple(spans[i][j].first, spans[i][j].second);
      out[i] = one;
    }
    return out;
  }

 private:
  std::shared_ptr<GilHeld> tokenizer_;
  std::shared_ptr<Analyzer> core_;
};

// ---------------------------------------------------------------------------------------------
// Index: argument checks and conversions around bm25::Store (ids, filters and locking live there)

IdBatch parse_ids(const py::object& ids, std::size_t n, const char* arg) {
  IdBatch out;
  if (ids.is_none()) return out;
  out.given = true;
  if (PyUnicode_Check(ids.ptr()) || PyBytes_Check(ids.ptr()))
    throw py::type_error(std::string(arg) + ": expected a list of str or int ids, got a single " + type_name(ids));
  py::sequence seq = py::reinterpret_borrow<py::sequence>(ids);
  if (!PySequence_Check(ids.ptr()))
    throw py::type_error(std::string(arg) + ": expected a list of str or int ids, got " + type_name(ids));
  if (seq.size() != n)
    throw py::value_error(std::string(arg) + ": got " + std::to_string(seq.size()) + " ids for " + std::to_string(n) +
                          " documents; expected one id per document");
  for (std::size_t i = 0; i < n; ++i) {
    py::object v = seq[i];
    const std::string what = std::string(arg) + "[" + std::to_string(i) + "]";
    if (PyUnicode_Check(v.ptr())) {
      if (i > 0 && !out.is_str) id_kind(std::string(arg) + ": mixes int and str ids; expected all int or all str");
      out.is_str = true;
      out.strs.push_back(to_utf8(v, what));
    } else if (!PyBool_Check(v.ptr()) && PyIndex_Check(v.ptr())) {
      if (out.is_str) id_kind(std::string(arg) + ": mixes int and str ids; expected all int or all str");
      PyObject* idx = PyNumber_Index(v.ptr());
      if (!idx) throw py::error_already_set();
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
      Py_DECREF(idx);
      if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        throw py::value_error(what + ": id does not fit in int64");
      }
      out.ints.push_back(static_cast<std::int64_t>(x));
    } else {
      id_kind(what + ": expected an int or str id, got " + type_name(v));
    }
  }
  return out;
}

// (ids, scores) arrays of a search result.
py::tuple to_python(const Hits& h) {
  const auto n = static_cast<py::ssize_t>(h.docs.size());
  py::array_t<float> scores(n);
  float* s = scores.mutable_data();
  for (py::ssize_t i = 0; i < n; ++i) s[i] = h.docs[i].score;
  py::array ids;
  if (h.str_ids) {
    ids = py::array(py::dtype("O"), std::vector<py::ssize_t>{n});
    auto** data = static_cast<PyObject**>(ids.mutable_data());
    for (py::ssize_t i = 0; i < n; ++i) {
      PyObject* o = PyUnicode_DecodeUTF8(h.strs[i].data(), static_cast<Py_ssize_t>(h.strs[i].size()), "replace");
      if (!o) throw py::error_already_set();
      Py_XDECREF(data[i]);
      data[i] = o;
    }
  } else {
    py::array_t<std::int64_t> a(n);
    std::copy(h.ints.begin(), h.ints.end(), a.mutable_data());
    ids = a;
  }
  return py::make_tuple(ids, scores);
}

py::list to_python(const std::vector<Hits>& hits) {
  py::list out(hits.size());
  for (std::size_t i = 0; i < hits.size(); ++i) out[i] = to_python(hits[i]);
  return out;
}

py::array_t<std::int64_t> to_numpy(const std::vector<std::int64_t>& v) {
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

py::array_t<double> to_numpy(const std::vector<double>& v) {
  py::array_t<double> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

class BM25Core {
 public:
  BM25Core(const std::string& method, double k1, double b, double delta, std::shared_ptr<PyAnalyzer> analyzer)
      : store_(Store::make_params(method, k1, b, delta)), analyzer_(std::move(analyzer)) {
    if (!analyzer_) throw py::value_error("analyzer: required");
  }

  std::shared_ptr<PyAnalyzer> analyzer() const { return analyzer_; }

  // Every store call that may wait for the store's lock runs with the GIL released (a writer
  // may need the GIL for the stemmer while it holds the lock).
  std::size_t size() const {
    py::gil_scoped_release release;
    return store_.size();
  }

  void add(const py::sequence& texts, const py::object& ids_obj) {
    const std::size_t n = texts.size();
    IdBatch ids = parse_ids(ids_obj, n, "ids");
    PyAnalyzer::Input in;
    analyzer_->prepare(texts, in, "texts");
    py::gil_scoped_release release;
    // Chunks of about 32 MB of text, so the token streams stay bounded.
    store_.add_analyzed(std::move(ids), n, analyzer_->core(), [&](std::size_t begin, TokenStream& stream) {
      constexpr std::size_t kChunkBytes = std::size_t(32) << 20;
      std::size_t end = begin, bytes = 0;
      while (end < n && (end == begin || bytes < kChunkBytes)) {
        bytes += in.views.empty() ? 64 * in.tokens[end].size() : in.views[end].size();
        ++end;
      }
      analyzer_->analyze_docs(in, begin, end, stream);
      return end;
    });
  }

  void add_tokenized(const py::sequence& docs, const py::object& ids_obj) {
    const std::size_t n = docs.size();
    IdBatch ids = parse_ids(ids_obj, n, "ids");
    std::vector<std::vector<std::string_view>> toks(n);
    std::vector<std::string> spill;
    for (std::size_t i = 0; i < n; ++i) {
      py::object d = docs[i];
      const std::string what = "token_lists[" + std::to_string(i) + "]";
      if (PyUnicode_Check(d.ptr()) || PyBytes_Check(d.ptr()) || !PySequence_Check(d.ptr()))
        throw py::type_error(what + ": expected a list of str tokens, got " + type_name(d));
      py::sequence s = py::reinterpret_borrow<py::sequence>(d);
      toks[i].reserve(s.size());
      for (std::size_t j = 0; j < s.size(); ++j) {
        py::object t = s[j];
        if (!PyUnicode_Check(t.ptr()))
          throw py::type_error(what + "[" + std::to_string(j) + "]: expected str, got " + type_name(t));
        Py_ssize_t len = 0;
        const char* p = PyUnicode_AsUTF8AndSize(t.ptr(), &len);
        if (!p) {
          PyErr_Clear();
          spill.push_back(to_utf8(t, what));
          toks[i].emplace_back();  // patched below (spill may reallocate)
          continue;
        }
        toks[i].emplace_back(p, static_cast<std::size_t>(len));
      }
    }
    // Re-point spilled tokens now that spill no longer grows.
    if (!spill.empty()) {
      std::size_t k = 0;
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < toks[i].size(); ++j)
          if (toks[i][j].data() == nullptr) toks[i][j] = spill[k++];
      }
    }
    py::gil_scoped_release release;
    store_.add_tokens(std::move(ids), toks);
  }

  void remove(const py::object& ids_obj) {
    if (PyUnicode_Check(ids_obj.ptr()) || !PySequence_Check(ids_obj.ptr()))
      throw py::type_error("ids: expected a list of ids, got " + type_name(ids_obj));
    py::sequence seq = py::reinterpret_borrow<py::sequence>(ids_obj);
    IdBatch p = parse_ids(ids_obj, seq.size(), "ids");
    std::vector<std::string> shown(seq.size());
    for (std::size_t i = 0; i < seq.size(); ++i) shown[i] = py::repr(seq[i]);
    py::gil_scoped_release release;
    store_.remove(p, shown);
  }

  static std::size_t check_k(long long k) {
    if (k <= 0) throw py::value_error("k: expected a positive number of results, got " + std::to_string(k));
    return static_cast<std::size_t>(k);
  }

  static Algorithm check_algorithm(int a) {
    if (a < 0 || a > 4)
      throw py::value_error("algorithm: expected 0 (auto), 1 (maxscore), 2 (exhaustive), 3 (direct) or 4 (blockmax)");
    return static_cast<Algorithm>(a);
  }

  static int check_threads(long long threads) {
    if (threads < 0) throw py::value_error("threads: expected >= 0 (0 = all cores), got " + std::to_string(threads));
    return static_cast<int>(std::min<long long>(threads, 1 << 16));
  }

  std::uint64_t generation() const { return store_.generation(); }

  // "int", "str", or None while no document is live.
  py::object ids_kind() const {
    switch (store_.ids_kind()) {
      case inverted::DocIds::Kind::Int: return py::str("int");
      case inverted::DocIds::Kind::Str: return py::str("str");
      default: return py::none();
    }
  }

  // The native allowed-set of an id array (IdFilter.ids): int64, or an object array of str.
  std::shared_ptr<CompiledFilter> compile_filter(const py::object& ids) {
    std::vector<std::int64_t> ints;
    std::vector<std::string> strs;
    if (py::isinstance<py::array>(ids) && py::array(ids).dtype().kind() == 'i') {
      auto a = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
      if (!a) throw py::error_already_set();
      ints.assign(a.data(), a.data() + a.size());
    } else {
      for (py::handle v : py::iter(ids)) {
        if (PyUnicode_Check(v.ptr())) {
          strs.push_back(to_utf8(v, "filter"));
        } else if (!PyBool_Check(v.ptr()) && PyIndex_Check(v.ptr())) {
          ints.push_back(v.cast<std::int64_t>());
        } else {
          id_kind("filter: ids must be int or str, got " + type_name(v));
        }
      }
    }
    py::gil_scoped_release release;
    return store_.compile_filter(std::move(ints), std::move(strs));
  }

  // The native allowed-set of a bitmap over int ids (bit i: id i allowed): an IdBitmap, as
  // MetadataIndex gives a filter's chunk ids (its pages shared, nothing copied), or a 1-d
  // uint64 array (bit i of word i / 64; copied). No id array, no lookup per id.
  // With `previous` (this filter compiled earlier, or None), only the slots added since are
  // tested when nothing else changed (Store::compile_filter_bits).
  std::shared_ptr<CompiledFilter> compile_filter_bits(const py::object& words, const py::object& previous) {
    const std::shared_ptr<CompiledFilter> prev = as_filter(previous);
    common::PagedBits bits;
    if (py::isinstance<common::PagedBits>(words)) {
      bits = words.cast<const common::PagedBits&>();
    } else {
      auto a = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(words);
      if (!a || a.ndim() != 1)
        throw py::value_error("words: expected an IdBitmap or a 1-d array of uint64, got " + type_name(words));
      bits = common::PagedBits(a.data(), static_cast<std::size_t>(a.size()), static_cast<std::size_t>(a.size()) * 64);
    }
    py::gil_scoped_release release;
    return store_.compile_filter_bits(std::move(bits), prev.get());
  }

  // The allowed set argument: None or a BM25AllowedSet. Taken as an object because pybind11's
  // holder caster probes NoneType for a module-local attribute (an AttributeError raised and
  // cleared, about 2 us per call) before it accepts None.
  static std::shared_ptr<CompiledFilter> as_filter(const py::object& o) {
    if (o.is_none()) return nullptr;
    return o.cast<std::shared_ptr<CompiledFilter>>();
  }

  py::tuple search_stems(const std::vector<std::string>& stems, std::size_t k, int algorithm,
                         const std::shared_ptr<CompiledFilter>& filter) {
    const Algorithm algo = check_algorithm(algorithm);
    Hits hits;
    {
      py::gil_scoped_release release;
      hits = store_.search(stems, k, algo, filter.get());
    }
    return to_python(hits);
  }

  py::tuple search(py::handle query, long long k, int algorithm, const py::object& allowed) {
    const std::shared_ptr<CompiledFilter> filter = as_filter(allowed);
    const std::size_t kk = check_k(k);
    py::list one;
    one.append(query);
    PyAnalyzer::Input in;
    analyzer_->prepare(one, in, "query");
    std::vector<std::string> stems;
    {
      py::gil_scoped_release release;
      analyzer_->analyze_query(in, 0, stems);
    }
    return search_stems(stems, kk, algorithm, filter);
  }

  py::tuple search_tokenized(const py::sequence& tokens, long long k, int algorithm, const py::object& allowed) {
    const std::size_t kk = check_k(k);
    return search_stems(token_strings(tokens, "tokens"), kk, algorithm, as_filter(allowed));
  }

  static std::vector<std::string> token_strings(const py::handle& tokens, const char* arg) {
    if (PyUnicode_Check(tokens.ptr()) || PyBytes_Check(tokens.ptr()) || !PySequence_Check(tokens.ptr()))
      throw py::type_error(std::string(arg) + ": expected a list of str tokens, got " + type_name(tokens));
    py::sequence seq = py::reinterpret_borrow<py::sequence>(tokens);
    std::vector<std::string> out;
    out.reserve(seq.size());
    for (std::size_t i = 0; i < seq.size(); ++i) {
      py::object t = seq[i];
      if (!PyUnicode_Check(t.ptr()))
        throw py::type_error(std::string(arg) + "[" + std::to_string(i) + "]: expected str, got " + type_name(t));
      out.push_back(to_utf8(t, arg));
    }
    return out;
  }

  // The analyzed terms of each query (given as token lists when tokenized); the analysis runs
  // without the GIL.
  std::vector<std::vector<std::string>> query_stems(const py::sequence& queries, bool tokenized) const {
    const std::size_t nq = queries.size();
    std::vector<std::vector<std::string>> stems(nq);
    if (tokenized) {
      for (std::size_t i = 0; i < nq; ++i)
        stems[i] = token_strings(queries[i], ("queries[" + std::to_string(i) + "]").c_str());
      return stems;
    }
    PyAnalyzer::Input in;
    analyzer_->prepare(queries, in, "queries");
    py::gil_scoped_release release;
    for (std::size_t i = 0; i < nq; ++i) analyzer_->analyze_query(in, i, stems[i]);
    return stems;
  }

  py::list search_batch(const py::sequence& queries, long long k, long long threads, bool tokenized, int algorithm,
                        const py::object& allowed) {
    const std::shared_ptr<CompiledFilter> filter = as_filter(allowed);
    const std::size_t kk = check_k(k);
    const Algorithm algo = check_algorithm(algorithm);
    const int nthreads = check_threads(threads);
    const std::vector<std::vector<std::string>> stems = query_stems(queries, tokenized);
    std::vector<Hits> hits;
    {
      py::gil_scoped_release release;
      hits = store_.search_batch(stems, kk, nthreads, algo, filter.get());
    }
    return to_python(hits);
  }

  // N, total length and the df of each term, read together.
  py::tuple term_stats(const py::sequence& terms) {
    const std::vector<std::string> names = token_strings(terms, "terms");
    CollectionStats cs;
    {
      py::gil_scoped_release release;
      cs = store_.term_stats(names);
    }
    py::array_t<std::uint64_t> out(static_cast<py::ssize_t>(cs.df.size()));
    std::copy(cs.df.begin(), cs.df.end(), out.mutable_data());
    return py::make_tuple(cs.num_docs, cs.total_len, out);
  }

  static DfMap df_map(const py::handle& df, const char* arg) {
    if (!PyDict_Check(df.ptr())) throw py::type_error(std::string(arg) + ": expected a dict {term: df}");
    DfMap out;
    for (auto item : py::reinterpret_borrow<py::dict>(df)) {
      if (!PyUnicode_Check(item.first.ptr())) throw py::type_error(std::string(arg) + ": terms must be str");
      const long long v = item.second.cast<long long>();
      if (v < 0) throw py::value_error(std::string(arg) + ": a df must be >= 0");
      out.emplace(to_utf8(item.first, arg), static_cast<std::uint64_t>(v));
    }
    return out;
  }

  py::list search_batch_with_stats(const py::sequence& queries, long long k, long long threads, bool tokenized,
                                   int algorithm, const py::object& allowed, long long num_docs, long long total_len,
                                   const py::sequence& dfs) {
    const std::shared_ptr<CompiledFilter> filter = as_filter(allowed);
    const std::size_t kk = check_k(k);
    const Algorithm algo = check_algorithm(algorithm);
    const int nthreads = check_threads(threads);
    if (num_docs < 0 || total_len < 0) throw py::value_error("stats: num_docs and total_len must be >= 0");
    CollectionStats base;
    base.num_docs = static_cast<std::uint64_t>(num_docs);
    base.total_len = static_cast<std::uint64_t>(total_len);
    const std::size_t nq = queries.size();
    if (dfs.size() != nq) throw py::value_error("stats: one df dict per query expected");
    std::vector<DfMap> maps(nq);
    for (std::size_t i = 0; i < nq; ++i) maps[i] = df_map(dfs[i], "stats");
    const std::vector<std::vector<std::string>> stems = query_stems(queries, tokenized);
    std::vector<Hits> hits;
    {
      py::gil_scoped_release release;
      hits = store_.search_batch_with_stats(stems, kk, nthreads, algo, filter.get(), base, maps);
    }
    return to_python(hits);
  }

  std::vector<std::string> stems_of(py::handle query) {
    if (!PyUnicode_Check(query.ptr()) && !PyBytes_Check(query.ptr())) return token_strings(query, "query");
    if (PyBytes_Check(query.ptr())) throw py::type_error("query: expected str or a list of str tokens, got bytes");
    py::list one;
    one.append(query);
    PyAnalyzer::Input in;
    analyzer_->prepare(one, in, "query");
    std::vector<std::string> stems;
    py::gil_scoped_release release;
    analyzer_->analyze_query(in, 0, stems);
    return stems;
  }

  py::array_t<double> get_scores(py::handle query) {
    const std::vector<std::string> stems = stems_of(query);
    std::vector<double> scores;
    {
      py::gil_scoped_release release;
      scores = store_.get_scores(stems);
    }
    return to_numpy(scores);
  }

  // One id given as a Python object: parsed, and how error messages name it.
  static IdBatch one_id(py::handle doc_id, std::string& shown) {
    py::list one;
    one.append(doc_id);
    shown = py::repr(doc_id);
    return parse_ids(one, 1, "doc_id");
  }

  py::dict explain(py::handle query, py::handle doc_id) {
    const std::vector<std::string> stems = stems_of(query);
    std::string shown;
    const IdBatch id = one_id(doc_id, shown);
    ExplainData ex;
    {
      py::gil_scoped_release release;
      ex = store_.explain(stems, id, shown);
    }
    py::list terms;
    double total = 0;
    for (std::size_t i = 0; i < ex.terms.size(); ++i) {
      const auto& e = ex.terms[i];
      py::dict d;
      d["term"] = to_pystr(ex.names[i]);
      d["query_tf"] = e.query_count;
      d["in_vocabulary"] = e.df > 0;
      d["tf"] = e.tf;
      d["df"] = e.df;
      d["idf"] = e.idf;
      d["length_norm"] = e.length_norm;
      d["tf_component"] = e.tf_component;
      d["contribution"] = e.contribution;
      total += e.contribution;
      terms.append(d);
    }
    py::dict out;
    out["doc_id"] = doc_id;
    out["score"] = total;
    out["method"] = method_name(ex.params.method);
    out["k1"] = ex.params.k1;
    out["b"] = ex.params.b;
    out["delta"] = ex.params.delta;
    out["num_docs"] = ex.num_docs;
    out["doc_len"] = ex.doc_len;
    out["avgdl"] = ex.avgdl;
    out["terms"] = terms;
    return out;
  }

  py::object ids_array() {
    Hits all;
    {
      py::gil_scoped_release release;
      all = store_.live_ids();
    }
    return to_python(all)[0];
  }

  // ----- rank_bm25 compatibility helpers

  py::array_t<std::int64_t> term_ids(const py::sequence& tokens) {
    const auto toks = token_strings(tokens, "query");
    std::vector<std::int64_t> found;
    {
      py::gil_scoped_release release;
      found = store_.term_ids(toks);
    }
    return to_numpy(found);
  }

  py::array_t<std::int64_t> document_frequencies() {
    std::vector<std::int64_t> v;
    {
      py::gil_scoped_release release;
      v = store_.document_frequencies();
    }
    return to_numpy(v);
  }

  py::array_t<std::int64_t> document_lengths() {
    std::vector<std::int64_t> v;
    {
      py::gil_scoped_release release;
      v = store_.document_lengths();
    }
    return to_numpy(v);
  }

  py::list vocabulary() {
    std::vector<std::string> terms;
    {
      py::gil_scoped_release release;
      terms = store_.vocabulary();
    }
    py::list out(terms.size());
    for (std::size_t t = 0; t < terms.size(); ++t) out[t] = to_pystr(terms[t]);
    return out;
  }

  py::array_t<double> rank_bm25_scores(py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> terms,
                                       py::array_t<double, py::array::c_style | py::array::forcecast> weights, int kind,
                                       double k1, double b, double delta) {
    if (terms.ndim() != 1 || weights.ndim() != 1 || terms.size() != weights.size())
      throw py::value_error("terms and weights: expected 1-D arrays of the same length");
    std::vector<std::int64_t> t(terms.data(), terms.data() + terms.size());
    std::vector<double> w(weights.data(), weights.data() + weights.size());
    std::vector<double> scores;
    {
      py::gil_scoped_release release;
      scores = store_.rank_bm25_scores(t, w, kind, k1, b, delta);
    }
    return to_numpy(scores);
  }

  // ----- parameters and statistics

  void set_params(const std::string& method, double k1, double b, double delta) {
    const Params p = Store::make_params(method, k1, b, delta);
    py::gil_scoped_release release;
    store_.set_params(p);
  }

  py::dict stats() {
    StoreStats v;
    {
      py::gil_scoped_release release;
      v = store_.stats();
    }
    py::dict d;
    d["num_docs"] = v.docs;
    d["num_terms"] = v.terms;
    d["num_postings"] = v.postings;
    d["num_segments"] = v.segments;
    d["num_deleted"] = v.dead;  // deleted documents whose postings a compaction has not dropped yet
    d["total_len"] = v.total_len;
    d["avgdl"] = v.avgdl;
    d["memory_bytes"] = v.memory;
    d["method"] = method_name(v.params.method);
    d["k1"] = v.params.k1;
    d["b"] = v.params.b;
    d["delta"] = v.params.delta;
    return d;
  }

  // ----- persistence

  void save(const std::string& path, const std::string& analyzer_json) {
    py::gil_scoped_release release;
    store_.save(path, analyzer_json);
  }

  static std::string read_analyzer_json(const std::string& path) {
    py::gil_scoped_release release;
    return read_index_metadata(path);
  }

  static std::shared_ptr<BM25Core> load(const std::string& path, bool mmap, std::shared_ptr<PyAnalyzer> analyzer) {
    auto core = std::make_shared<BM25Core>("lucene", 1.2, 0.75, 0.0, std::move(analyzer));
    py::gil_scoped_release release;
    core->store_.load(path, mmap);
    return core;
  }

  // ----- positions and phrases

  void enable_positions() {
    py::gil_scoped_release release;
    store_.enable_positions();
  }

  bool has_positions() const {
    py::gil_scoped_release release;
    return store_.has_positions();
  }

  std::size_t positions_bytes() const {
    py::gil_scoped_release release;
    return store_.positions_bytes();
  }

  // (live ordinals, tfs) of an index term.
  py::tuple postings(const std::string& term) {
    std::vector<std::int64_t> ord, tf;
    {
      py::gil_scoped_release release;
      store_.postings(term, ord, tf);
    }
    return py::make_tuple(to_numpy(ord), to_numpy(tf));
  }

  // Phrases as (analyzed terms, slop), read with the GIL held.
  static std::vector<PhraseText> phrase_texts(const py::list& phrases) {
    std::vector<PhraseText> out;
    for (py::handle h : phrases) {
      auto t = h.cast<py::tuple>();
      PhraseText p;
      for (py::handle w : t[0].cast<py::list>()) p.terms.push_back(to_utf8(w, "phrase term"));
      p.slop = t[1].cast<std::int64_t>();
      if (p.slop < 0) throw py::value_error("slop: expected >= 0, got " + std::to_string(p.slop));
      out.push_back(std::move(p));
    }
    return out;
  }

  py::tuple search_phrases(py::handle query, const py::list& phrases, long long k, const py::object& allowed) {
    const std::shared_ptr<CompiledFilter> filter = as_filter(allowed);
    const std::size_t kk = check_k(k);
    const std::vector<std::string> stems = stems_of(query);
    const std::vector<PhraseText> texts = phrase_texts(phrases);
    Hits hits;
    {
      py::gil_scoped_release release;
      hits = store_.search_phrases(stems, texts, kk, filter.get());
    }
    return to_python(hits);
  }

  // (score, phrase frequencies) of one document, in double precision.
  py::tuple phrase_score(py::handle query, const py::list& phrases, py::handle doc_id) {
    const std::vector<std::string> stems = stems_of(query);
    const std::vector<PhraseText> texts = phrase_texts(phrases);
    std::string shown;
    const IdBatch id = one_id(doc_id, shown);
    std::vector<double> pf;
    double sc = 0.0;
    {
      py::gil_scoped_release release;
      sc = store_.phrase_score(stems, texts, id, shown, pf);
    }
    return py::make_tuple(sc, pf);
  }

 private:
  Store store_;
  std::shared_ptr<PyAnalyzer> analyzer_;
};

}  // namespace

void bind_bm25(py::module_& m) {
  py::register_exception<IndexFileError>(m, "IndexFileError", PyExc_ValueError);
  py::register_exception<IndexWriteError>(m, "IndexWriteError", PyExc_OSError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const IdError& e) {
      raise_contract_error(e.kind == IdError::Kind::Unknown     ? "UnknownIdError"
                           : e.kind == IdError::Kind::Duplicate ? "DuplicateIdError"
                                                                : "IdKindError",
                           e.what());
    }
  });

  py::class_<CompiledFilter, std::shared_ptr<CompiledFilter>>(m, "BM25AllowedSet")
      .def_readonly("generation", &CompiledFilter::generation)
      .def_property_readonly("count", [](const CompiledFilter& f) { return f.count; })
      .def_property_readonly("mask", [](const CompiledFilter& f) {
        py::array_t<std::uint8_t> a(static_cast<py::ssize_t>(f.mask.size()));
        if (f.mask.size()) std::memcpy(a.mutable_data(), f.mask.data(), f.mask.size());
        return a;
      });

  py::class_<PyAnalyzer, std::shared_ptr<PyAnalyzer>>(m, "Analyzer")
      .def(py::init<bool, const std::vector<std::string>&, py::object, bool, py::object, bool, bool, bool, bool>(),
           py::arg("lowercase"), py::arg("stopwords"), py::arg("stem_words"), py::arg("split_identifiers"),
           py::arg("tokenizer"), py::arg("cjk_bigrams") = false, py::arg("symbol_letters") = false,
           py::arg("caps_text_symbols") = true, py::arg("fold_accents") = false)
      .def("analyze", &PyAnalyzer::analyze, py::arg("text"))
      .def("analyze_offsets", &PyAnalyzer::analyze_offsets, py::arg("text"))
      .def("match_offsets", &PyAnalyzer::match_offsets, py::arg("texts"), py::arg("terms"))
      .def_property_readonly("num_surfaces", [](PyAnalyzer& a) { return a.core().num_surfaces(); });

  py::class_<BM25Core, std::shared_ptr<BM25Core>>(m, "BM25Core")
      .def(py::init<const std::string&, double, double, double, std::shared_ptr<PyAnalyzer>>(), py::arg("method"),
           py::arg("k1"), py::arg("b"), py::arg("delta"), py::arg("analyzer"))
      .def("__len__", &BM25Core::size)
      .def("add", &BM25Core::add, py::arg("texts"), py::arg("ids") = py::none())
      .def("add_tokenized", &BM25Core::add_tokenized, py::arg("token_lists"), py::arg("ids") = py::none())
      .def("delete", &BM25Core::remove, py::arg("ids"))
      .def("search", &BM25Core::search, py::arg("query"), py::arg("k"), py::arg("algorithm") = 0,
           py::arg("allowed") = py::none())
      .def("search_tokenized", &BM25Core::search_tokenized, py::arg("tokens"), py::arg("k"), py::arg("algorithm") = 0,
           py::arg("allowed") = py::none())
      .def("search_batch", &BM25Core::search_batch, py::arg("queries"), py::arg("k"), py::arg("threads"),
           py::arg("tokenized") = false, py::arg("algorithm") = 0, py::arg("allowed") = py::none())
      .def("search_batch_with_stats", &BM25Core::search_batch_with_stats, py::arg("queries"), py::arg("k"),
           py::arg("threads"), py::arg("tokenized"), py::arg("algorithm"), py::arg("allowed"), py::arg("num_docs"),
           py::arg("total_len"), py::arg("dfs"))
      .def("term_stats", &BM25Core::term_stats, py::arg("terms"))
      .def("compile_filter", &BM25Core::compile_filter, py::arg("ids"))
      .def("compile_filter_bits", &BM25Core::compile_filter_bits, py::arg("words"), py::arg("previous") = py::none())
      .def_property_readonly("generation", &BM25Core::generation)
      .def_property_readonly("id_kind", &BM25Core::ids_kind, "\"int\", \"str\", or None while no document is live.")
      .def("get_scores", &BM25Core::get_scores, py::arg("query"))
      .def("explain", &BM25Core::explain, py::arg("query"), py::arg("doc_id"))
      .def("ids", &BM25Core::ids_array)
      .def("term_ids", &BM25Core::term_ids, py::arg("tokens"))
      .def("document_frequencies", &BM25Core::document_frequencies)
      .def("document_lengths", &BM25Core::document_lengths)
      .def("vocabulary", &BM25Core::vocabulary)
      .def("rank_bm25_scores", &BM25Core::rank_bm25_scores, py::arg("terms"), py::arg("weights"), py::arg("kind"),
           py::arg("k1"), py::arg("b"), py::arg("delta"))
      .def("set_params", &BM25Core::set_params, py::arg("method"), py::arg("k1"), py::arg("b"), py::arg("delta"))
      .def("stats", &BM25Core::stats)
      .def("save", &BM25Core::save, py::arg("path"), py::arg("analyzer_json"))
      .def("enable_positions", &BM25Core::enable_positions)
      .def("postings", &BM25Core::postings, py::arg("term"))
      .def_property_readonly("has_positions", &BM25Core::has_positions)
      .def("positions_bytes", &BM25Core::positions_bytes)
      .def("search_phrases", &BM25Core::search_phrases, py::arg("query"), py::arg("phrases"), py::arg("k"),
           py::arg("allowed") = py::none())
      .def("phrase_score", &BM25Core::phrase_score, py::arg("query"), py::arg("phrases"), py::arg("doc_id"))
      .def_static("read_analyzer_json", &BM25Core::read_analyzer_json, py::arg("path"))
      .def_static("load", &BM25Core::load, py::arg("path"), py::arg("mmap"), py::arg("analyzer"))
      .def_property_readonly("analyzer", &BM25Core::analyzer);
}

}  // namespace ragfind::bindings
