// One registration function per area; module.cpp calls them all into ragfind._core. Also the
// helpers more than one binding file uses (the files are compiled together as unity batches, so
// a shared helper is defined once here rather than in each file's anonymous namespace).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace ragfind::bindings {

void bind_cpu(pybind11::module_& m);
void bind_bm25(pybind11::module_& m);              // analyzer, inverted index, BM25
void bind_dense(pybind11::module_& m);             // similarity kernels, exact dense index
void bind_hnsw(pybind11::module_& m);              // hnswlib graph check, lock, result finishing
void bind_fusion(pybind11::module_& m);            // rank and score fusion
void bind_late_interaction(pybind11::module_& m);  // MaxSim, late-interaction index
void bind_sparse(pybind11::module_& m);            // learned-sparse (SPLADE) index
void bind_metadata(pybind11::module_& m);          // metadata (payload) index for filters
void bind_pq(pybind11::module_& m);                // product quantisation, 4-bit fast scan
void bind_passages(pybind11::module_& m);          // passage columns of the document store
void bind_text(pybind11::module_& m);              // WordPiece token counter for chunking

// The Python type name of h, for error messages ("got str").
inline std::string type_name(pybind11::handle h) {
  return pybind11::str(pybind11::type::handle_of(h).attr("__name__"));
}
[[noreturn]] inline void fail_type(const std::string& msg) { throw pybind11::type_error(msg); }
[[noreturn]] inline void fail_value(const std::string& msg) { throw pybind11::value_error(msg); }

}  // namespace ragfind::bindings
