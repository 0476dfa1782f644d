// Bindings for the WordPiece token counter chunking uses (ragfind.pipeline.chunking).
//
// Texts are converted to UTF-8 and held while holding the GIL; counting runs without it.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "ragfind/text/wordpiece.hpp"

namespace py = pybind11;

namespace ragfind::bindings {

namespace {

using ragfind::text::WordPieceConfig;
using ragfind::text::WordPieceCounter;

// UTF-8 of a str (cached by Python in the object), or false for a str UTF-8 cannot encode (a
// lone surrogate): the caller hands such a text to `tokenizers`, which raises its own error.
bool utf8_of(py::handle h, std::string_view& out) {
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
  if (s == nullptr) {
    PyErr_Clear();
    return false;
  }
  out = std::string_view(s, static_cast<std::size_t>(n));
  return true;
}

// The UTF-8 of each str of a sequence (ok[i] false: hand text i to `tokenizers`), read with the
// GIL; the texts are held so the views stay valid once it is released. TypeError for a non-str.
struct Utf8Texts {
  std::vector<py::object> held;
  std::vector<std::string_view> views;
  std::vector<char> ok;

  explicit Utf8Texts(const py::sequence& texts) {
    const auto n = static_cast<std::size_t>(py::len(texts));
    views.resize(n);
    ok.assign(n, 0);
    held.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      py::object t = texts[i];
      if (!PyUnicode_Check(t.ptr())) {
        throw py::type_error("texts[" + std::to_string(i) + "] is a " + type_name(t) + "; expected str");
      }
      ok[i] = utf8_of(t, views[i]);
      held.push_back(std::move(t));
    }
  }
};

}  // namespace

void bind_text(py::module_& m) {
  py::class_<WordPieceCounter>(m, "WordPieceCounter", R"doc(
BERT WordPiece token counter with the token offsets of HuggingFace ``tokenizers``.

Runs BertNormalizer, BertPreTokenizer and greedy longest-match WordPiece (no special tokens)
and reports where tokens start, for chunking. A text it cannot promise to tokenize exactly as
``tokenizers`` does (an added token such as "[CLS]" in it, a code point whose Unicode data
differs between ``tokenizers`` and Python, a non-spacing-mark reordering case, a lone
surrogate) is reported as such (-1 / None) for the caller to tokenize with ``tokenizers``.
)doc")
      .def(py::init([](const std::vector<std::string>& vocab, const std::string& unk_token,
                       const std::string& continuing_subword_prefix, std::size_t max_input_chars_per_word,
                       bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase,
                       const std::vector<std::string>& added_tokens) {
             WordPieceConfig c;
             c.vocab = vocab;
             c.unk_token = unk_token;
             c.continuing_subword_prefix = continuing_subword_prefix;
             c.max_input_chars_per_word = max_input_chars_per_word;
             c.clean_text = clean_text;
             c.handle_chinese_chars = handle_chinese_chars;
             c.strip_accents = strip_accents;
             c.lowercase = lowercase;
             c.added_tokens = added_tokens;
             return WordPieceCounter(c);
           }),
           py::arg("vocab"), py::arg("unk_token") = "[UNK]", py::arg("continuing_subword_prefix") = "##",
           py::arg("max_input_chars_per_word") = 100, py::arg("clean_text") = true,
           py::arg("handle_chinese_chars") = true, py::arg("strip_accents") = true, py::arg("lowercase") = true,
           py::arg("added_tokens") = std::vector<std::string>{},
           "Raises ValueError for an empty vocabulary or an unk_token not in it.")
      .def(
          "count",
          [](const WordPieceCounter& self, const py::sequence& texts) {
            const Utf8Texts in(texts);
            const std::size_t n = in.views.size();
            const auto& views = in.views;
            const auto& ok = in.ok;
            py::array_t<std::int64_t> out(static_cast<py::ssize_t>(n));
            std::int64_t* counts = out.mutable_data();
            {
              py::gil_scoped_release release;
              for (std::size_t i = 0; i < n; ++i) counts[i] = ok[i] ? self.count(views[i]) : -1;
            }
            return out;
          },
          py::arg("texts"),
          "Tokens in each text (int64 array), -1 where the text must go to `tokenizers`.\n\n"
          "Raises TypeError for an item that is not a str.")
      .def(
          "count_with_starts",
          [](const WordPieceCounter& self, const py::sequence& texts, std::int64_t over) {
            const Utf8Texts in(texts);
            const std::size_t n = in.views.size();
            const auto& views = in.views;
            const auto& ok = in.ok;
            py::array_t<std::int64_t> out(static_cast<py::ssize_t>(n));
            std::int64_t* counts = out.mutable_data();
            std::vector<std::vector<std::int64_t>> kept(n);
            {
              py::gil_scoped_release release;
              std::vector<std::int64_t> starts;
              for (std::size_t i = 0; i < n; ++i) {
                starts.clear();
                if (!ok[i] || !self.token_starts(views[i], starts)) {
                  counts[i] = -1;
                  continue;
                }
                counts[i] = static_cast<std::int64_t>(starts.size());
                if (counts[i] > over) kept[i] = starts;
              }
            }
            py::list starts_of(n);
            for (std::size_t i = 0; i < n; ++i) {
              if (counts[i] > over) {
                py::array_t<std::int64_t> a(static_cast<py::ssize_t>(kept[i].size()));
                std::copy(kept[i].begin(), kept[i].end(), a.mutable_data());
                starts_of[i] = std::move(a);
              } else {
                starts_of[i] = py::none();
              }
            }
            return py::make_tuple(out, starts_of);
          },
          py::arg("texts"), py::arg("over"),
          "(counts, starts): count() of each text, and token_starts() of each text with more "
          "than `over` tokens (None for the others, and for the texts count() gives -1).\n\n"
          "Raises TypeError for an item that is not a str.")
      .def(
          "token_starts",
          [](const WordPieceCounter& self, const py::str& text) -> py::object {
            std::string_view view;
            if (!utf8_of(text, view)) return py::none();
            std::vector<std::int64_t> starts;
            bool ok = false;
            {
              py::gil_scoped_release release;
              ok = self.token_starts(view, starts);
            }
            if (!ok) return py::none();
            py::array_t<std::int64_t> out(static_cast<py::ssize_t>(starts.size()));
            std::copy(starts.begin(), starts.end(), out.mutable_data());
            return std::move(out);
          },
          py::arg("text"),
          "Character offset of each token's first character (int64 array, the starts of "
          "`tokenizers`' Encoding.offsets), or None where the text must go to `tokenizers`.");
}

}  // namespace ragfind::bindings
