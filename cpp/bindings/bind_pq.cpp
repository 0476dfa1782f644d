// Bindings for compressed IVF codes: product quantisation (ragfind/dense/pq.hpp: training,
// encoding, the 4-bit fast scan, IVF-PQ search) and RaBitQ (rabitq.hpp, ivf_rabitq.hpp).
// Arguments are checked with the GIL held (TypeError/ValueError naming them), the work runs
// without it; nothing is cast silently.
#include <pybind11/numpy.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "ragfind/common/parallel.hpp"
#include "ragfind/dense/ivf_rabitq.hpp"
#include "ragfind/dense/pq.hpp"
#include "ragfind/dense/rabitq.hpp"

namespace py = pybind11;

namespace ragfind::bindings {
namespace {

// A C-contiguous array of one numpy dtype (kind + itemsize) and rank.
void check_array(const py::array& a, const char* name, char kind, size_t itemsize, int ndim, const char* want) {
  if (a.dtype().kind() != kind || static_cast<size_t>(a.itemsize()) != itemsize)
    throw py::type_error(std::string(name) + " must have dtype " + want + ", got " +
                         py::str(a.dtype()).cast<std::string>());
  if (a.ndim() != ndim)
    fail_value(std::string(name) + " must be " + std::to_string(ndim) + "-D, got " + std::to_string(a.ndim()) + "-D");
  if ((a.flags() & py::array::c_style) == 0) fail_value(std::string(name) + " must be C-contiguous");
}

// The coarse form passed with these centroids (None: none), refused when made from others.
const dense::CoarseCentroids* coarse_of(const py::object& coarse, const py::array& centroids) {
  if (coarse.is_none()) return nullptr;
  const auto& cc = coarse.cast<const dense::CoarseCentroids&>();
  if (!dense::coarse_matches(cc, static_cast<const float*>(centroids.data()), static_cast<size_t>(centroids.shape(0)),
                             static_cast<size_t>(centroids.shape(1))))
    fail_value("coarse was not made from these centroids (coarse_centroids(centroids))");
  return &cc;
}

// Codebooks from an (m, ksub, dsub) float32 array (ksub 16 or 256): copied, or with `borrow`
// read in place (the caller keeps cw alive while the codebook is used).
dense::PqCodebook codebook(const py::array& cw, bool borrow = false) {
  check_array(cw, "codewords", 'f', 4, 3, "float32");
  dense::PqCodebook pq;
  pq.m = static_cast<size_t>(cw.shape(0));
  pq.ksub = static_cast<size_t>(cw.shape(1));
  pq.dsub = static_cast<size_t>(cw.shape(2));
  if (pq.ksub != 16 && pq.ksub != 256) fail_value("codewords must have 16 or 256 codewords per sub-space");
  if (pq.m == 0 || pq.dsub == 0) fail_value("codewords must not be empty");
  pq.bits = pq.ksub == 16 ? 4 : 8;
  pq.d = pq.m * pq.dsub;
  const float* p = static_cast<const float*>(cw.data());
  if (borrow) pq.borrowed = p;
  else pq.codewords.assign(p, p + pq.m * pq.ksub * pq.dsub);
  return pq;
}

// The optional `allowed` argument of the IVF searches: nullptr for None, else a uint8 array of
// one entry per row of exact, kept alive in `keep`.
const uint8_t* allowed_mask(const py::object& allowed, size_t n_exact, py::array& keep) {
  if (allowed.is_none()) return nullptr;
  keep = allowed.cast<py::array>();
  check_array(keep, "allowed", 'u', 1, 1, "uint8");
  if (static_cast<size_t>(keep.shape(0)) != n_exact) fail_value("allowed must have one entry per row of exact");
  return static_cast<const uint8_t*>(keep.data());
}

}  // namespace

void bind_pq(py::module_& m) {
  m.def(
      "pq_train",
      [](py::array X, size_t m, size_t bits, int iters, uint64_t seed, int threads) {
        check_array(X, "X", 'f', 4, 2, "float32");
        const size_t n = static_cast<size_t>(X.shape(0)), d = static_cast<size_t>(X.shape(1));
        if (m == 0 || d % m != 0)
          fail_value("pq_m must divide the dimension " + std::to_string(d) + ", got " + std::to_string(m));
        if (m > 256) fail_value("pq_m must be at most 256, got " + std::to_string(m));
        if (bits != 4 && bits != 8) fail_value("pq_bits must be 4 or 8, got " + std::to_string(bits));
        if (n < (size_t(1) << bits))
          fail_value("pq training needs at least " + std::to_string(size_t(1) << bits) + " rows, got " +
                     std::to_string(n));
        if (threads < 0) fail_value("threads must be >= 0 (0 = automatic)");
        const float* px = static_cast<const float*>(X.data());
        dense::PqCodebook pq;
        {
          py::gil_scoped_release release;
          pq = dense::train_pq(px, n, d, m, bits, iters, seed, threads);
        }
        py::array_t<float> out({pq.m, pq.ksub, pq.dsub});
        std::copy(pq.codewords.begin(), pq.codewords.end(), out.mutable_data());
        return out;
      },
      py::arg("X"), py::arg("m"), py::arg("bits"), py::arg("iters") = 10, py::arg("seed") = 1234,
      py::arg("threads") = 0, "PQ codebooks (m, 2**bits, d // m) trained on the rows of X (L2 k-means per sub-space).");

  m.def(
      "pq_encode",
      [](py::array X, py::array codewords, int threads) {
        const dense::PqCodebook pq = codebook(codewords);
        check_array(X, "X", 'f', 4, 2, "float32");
        if (static_cast<size_t>(X.shape(1)) != pq.d)
          fail_value("X must have " + std::to_string(pq.d) + " columns (m * dsub), got " + std::to_string(X.shape(1)));
        if (threads < 0) fail_value("threads must be >= 0 (0 = automatic)");
        const size_t n = static_cast<size_t>(X.shape(0));
        py::array_t<uint8_t> codes({n, pq.m});
        const float* px = static_cast<const float*>(X.data());
        uint8_t* pc = codes.mutable_data();
        {
          py::gil_scoped_release release;
          dense::encode_pq(pq, px, n, threads, pc);
        }
        return codes;
      },
      py::arg("X"), py::arg("codewords"), py::arg("threads") = 0,
      "uint8 codes (n, m): the nearest codeword of each sub-vector of each row of X.");

  m.def(
      "pq4_pack",
      [](py::array codes) {
        check_array(codes, "codes", 'u', 1, 2, "uint8");
        const size_t n = static_cast<size_t>(codes.shape(0)), mm = static_cast<size_t>(codes.shape(1));
        if (mm == 0 || mm > 256) fail_value("codes must have 1 to 256 columns, got " + std::to_string(mm));
        const uint8_t* pc = static_cast<const uint8_t*>(codes.data());
        for (size_t i = 0; i < n * mm; ++i)
          if (pc[i] > 15) fail_value("4-bit codes must be below 16, got " + std::to_string(pc[i]));
        const size_t nb = (n + dense::kPqBlock - 1) / dense::kPqBlock;
        py::array_t<uint8_t> out(nb * dense::pq4_mpad(mm) * 16);
        uint8_t* po = out.mutable_data();
        {
          py::gil_scoped_release release;
          dense::pack_pq4(pc, n, mm, po);
        }
        return out;
      },
      py::arg("codes"), "4-bit codes (n, m) packed in fast-scan blocks of 32 rows (1-D uint8).");

  m.def(
      "pq4_scan",
      [](py::array blocks, size_t n, py::array lut) -> py::tuple {
        check_array(blocks, "blocks", 'u', 1, 1, "uint8");
        check_array(lut, "lut", 'f', 4, 2, "float32");
        const size_t mm = static_cast<size_t>(lut.shape(0));
        if (lut.shape(1) != 16) fail_value("lut must have 16 columns, got " + std::to_string(lut.shape(1)));
        if (mm == 0 || mm > 256) fail_value("lut must have 1 to 256 rows, got " + std::to_string(mm));
        const size_t mpad = dense::pq4_mpad(mm), nb = (n + dense::kPqBlock - 1) / dense::kPqBlock;
        if (static_cast<size_t>(blocks.shape(0)) != nb * mpad * 16)
          fail_value("blocks must hold " + std::to_string(nb * mpad * 16) + " bytes for n=" + std::to_string(n) +
                     ", got " + std::to_string(blocks.shape(0)));
        const dense::Pq4Lut q = dense::quantise_pq4_lut(static_cast<const float*>(lut.data()), mm);
        std::vector<uint16_t> all(nb * dense::kPqBlock);  // whole blocks; the rows past n are padding
        py::array_t<uint16_t> sums(n);
        const uint8_t* pb = static_cast<const uint8_t*>(blocks.data());
        uint16_t* ps = sums.mutable_data();
        {
          py::gil_scoped_release release;
          dense::pq4_scan_kernels().scan(pb, nb, mpad, q.lut8.data(), all.data());
          std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), ps);
        }
        return py::make_tuple(sums, q.bias, q.scale);
      },
      py::arg("blocks"), py::arg("n"), py::arg("lut"),
      "4-bit fast scan: (sums uint16 (n,), bias, scale); row i scores about bias + scale * sums[i].");

  m.def(
      "pq8_scan",
      [](py::array codes, py::array lut) {
        check_array(codes, "codes", 'u', 1, 2, "uint8");
        check_array(lut, "lut", 'f', 4, 2, "float32");
        const size_t n = static_cast<size_t>(codes.shape(0)), mm = static_cast<size_t>(codes.shape(1));
        if (lut.shape(1) != 256) fail_value("lut must have 256 columns, got " + std::to_string(lut.shape(1)));
        if (static_cast<size_t>(lut.shape(0)) != mm)
          fail_value("lut must have one row per column of codes (" + std::to_string(mm) + "), got " +
                     std::to_string(lut.shape(0)));
        py::array_t<float> sums(n);
        const uint8_t* pc = static_cast<const uint8_t*>(codes.data());
        const float* pl = static_cast<const float*>(lut.data());
        float* ps = sums.mutable_data();
        {
          py::gil_scoped_release release;
          dense::pq4_scan_kernels().scan8(pc, n, mm, pl, ps);
        }
        return sums;
      },
      py::arg("codes"), py::arg("lut"),
      "8-bit PQ scan: sums float32 (n,), sums[i] = sum over j of lut[j, codes[i, j]] (in order of j).");

  m.def(
      "ivf_pq_search",
      [](py::array centroids, py::array codewords, py::array blocks, py::array row0, py::array lens, py::object pos,
         py::array exact, py::array Q, size_t k, size_t nprobe, size_t rerank, int threads, py::object start,
         py::object allowed, const std::string& metric, py::object coarse) -> py::tuple {
        if (metric != "ip" && metric != "l2") fail_value("metric must be 'ip' or 'l2', got '" + metric + "'");
        const dense::PqCodebook pq = codebook(codewords, true);  // codewords outlives the search
        const bool eight = pq.bits == 8;
        check_array(centroids, "centroids", 'f', 4, 2, "float32");
        check_array(blocks, "blocks", 'u', 1, 1, "uint8");
        check_array(row0, "row0", 'i', 8, 1, "int64");
        check_array(lens, "lens", 'i', 8, 1, "int64");
        const bool exact_f16 = exact.dtype().kind() == 'f' && exact.itemsize() == 2;
        check_array(exact, "exact", 'f', exact_f16 ? 2 : 4, 2, "float32 or float16");
        check_array(Q, "Q", 'f', 4, 2, "float32");
        const size_t d = pq.d, nlist = static_cast<size_t>(centroids.shape(0));
        if (static_cast<size_t>(centroids.shape(1)) != d || static_cast<size_t>(exact.shape(1)) != d ||
            static_cast<size_t>(Q.shape(1)) != d)
          fail_value("centroids, exact and Q must have " + std::to_string(d) + " columns (m * dsub)");
        if (static_cast<size_t>(row0.shape(0)) != nlist || static_cast<size_t>(lens.shape(0)) != nlist)
          fail_value("row0 and lens must have one entry per centroid");
        if (threads < 0) fail_value("threads must be >= 0 (0 = automatic)");
        if (pos.is_none() == start.is_none()) fail_value("pass exactly one of pos and start");
        // 4-bit codes come in blocks of 32 rows, 8-bit codes in rows of m bytes.
        const size_t unit = eight ? pq.m : dense::pq4_mpad(pq.m) * 16, per_unit = eight ? 1 : dense::kPqBlock;
        const size_t align = eight ? 1 : dense::kPqBlock, n_exact = static_cast<size_t>(exact.shape(0));
        if (static_cast<size_t>(blocks.shape(0)) % unit != 0)
          fail_value("blocks must hold whole " + std::string(eight ? "rows" : "blocks") + " of " +
                     std::to_string(unit) + " bytes");
        const size_t rows = static_cast<size_t>(blocks.shape(0)) / unit * per_unit;
        const int64_t* pp = nullptr;  // checked as the scan reads it
        const int64_t* st = nullptr;
        py::array pos_a, start_a, allowed_a;
        if (!pos.is_none()) {
          pos_a = pos.cast<py::array>();
          check_array(pos_a, "pos", 'i', 8, 1, "int64");
          if (static_cast<size_t>(pos_a.shape(0)) != rows) fail_value("pos must have one entry per row of blocks");
          pp = static_cast<const int64_t*>(pos_a.data());
        } else {
          start_a = start.cast<py::array>();
          check_array(start_a, "start", 'i', 8, 1, "int64");
          if (static_cast<size_t>(start_a.shape(0)) != nlist) fail_value("start must have one entry per centroid");
          st = static_cast<const int64_t*>(start_a.data());
        }
        const int64_t* r0 = static_cast<const int64_t*>(row0.data());
        const int64_t* ln = static_cast<const int64_t*>(lens.data());
        for (size_t l = 0; l < nlist; ++l) {
          if (r0[l] < 0 || ln[l] < 0 || r0[l] % static_cast<int64_t>(align) != 0 ||
              static_cast<size_t>(r0[l] + ln[l]) > rows)
            fail_value("list " + std::to_string(l) + " lies outside blocks or does not start a block");
          if (st != nullptr && (st[l] < 0 || static_cast<size_t>(st[l] + ln[l]) > n_exact))
            fail_value("list " + std::to_string(l) + " lies outside exact");
        }
        const uint8_t* al = allowed_mask(allowed, n_exact, allowed_a);
        dense::IvfPqView v;
        v.centroids = static_cast<const float*>(centroids.data());
        v.nlist = nlist;
        v.pq = &pq;
        v.blocks = static_cast<const uint8_t*>(blocks.data());
        v.row0 = r0;
        v.len = ln;
        v.pos = pp;
        v.start = st;
        v.allowed = al;
        if (exact_f16) v.exact_f16 = static_cast<const uint16_t*>(exact.data());
        else v.exact = static_cast<const float*>(exact.data());
        v.n_exact = n_exact;
        v.l2 = metric == "l2";
        v.coarse = coarse_of(coarse, centroids);
        const size_t nq = static_cast<size_t>(Q.shape(0));
        py::array_t<int64_t> out_pos({nq, k});
        py::array_t<float> out_scores({nq, k});
        int64_t* op = out_pos.mutable_data();
        float* os = out_scores.mutable_data();
        const float* pq_ = static_cast<const float*>(Q.data());
        {
          py::gil_scoped_release release;
          dense::ivf_pq_search_batch(v, pq_, nq, k, nprobe, rerank, threads, op, os);
        }
        return py::make_tuple(out_pos, out_scores);
      },
      py::arg("centroids"), py::arg("codewords"), py::arg("blocks"), py::arg("row0"), py::arg("lens"), py::arg("pos"),
      py::arg("exact"), py::arg("Q"), py::arg("k"), py::arg("nprobe"), py::arg("rerank"), py::arg("threads") = 0,
      py::arg("start") = py::none(), py::arg("allowed") = py::none(), py::arg("metric") = "ip",
      py::arg("coarse") = py::none(),
      "IVF-PQ search by inner product or (metric 'l2') squared distance, ascending (4-bit fast scan or 8-bit float "
      "tables, re-scoring of the "
      "k * rerank best against exact, float32 or float16 rows): (positions (nq, k) padded with -1, "
      "scores (nq, k) padded with NaN). 4-bit blocks are pq4_pack's, 8-bit ones the code rows "
      "(m bytes each) flattened. Row i of list l is pos[row0[l] + i], or with pos=None start[l] + i; "
      "allowed (uint8 per row of exact) admits rows; coarse (coarse_centroids(centroids)) picks the same lists "
      "faster.");

  py::class_<dense::CoarseCentroids, std::shared_ptr<dense::CoarseCentroids>>(
      m, "CoarseCentroids", "Centroids in int8 for a first pass over a query's list scores (coarse_centroids).")
      .def_property_readonly("nlist", [](const dense::CoarseCentroids& c) { return c.nlist; })
      .def_property_readonly("dim", [](const dense::CoarseCentroids& c) { return c.d; });

  m.def(
      "coarse_centroids",
      [](py::array centroids) {
        check_array(centroids, "centroids", 'f', 4, 2, "float32");
        const size_t nlist = static_cast<size_t>(centroids.shape(0)), d = static_cast<size_t>(centroids.shape(1));
        if (nlist == 0 || d == 0) fail_value("centroids must not be empty");
        auto cc = std::make_shared<dense::CoarseCentroids>();
        const float* C = static_cast<const float*>(centroids.data());
        try {
          py::gil_scoped_release release;
          *cc = dense::make_coarse_centroids(C, nlist, d);
        } catch (const std::invalid_argument& e) { fail_value(e.what()); }
        return cc;
      },
      py::arg("centroids"),
      "The int8 form of (nlist, d) float32 centroids that ivf_pq_search(coarse=) picks lists with: the same lists "
      "and scores as a full float32 scan.");

  m.def(
      "rabitq_rotation",
      [](size_t d, uint64_t seed) {
        if (d < 2) fail_value("rabitq needs dim >= 2, got " + std::to_string(d));
        dense::RabitqRotation rot;
        {
          py::gil_scoped_release release;
          rot = dense::make_rabitq_rotation(d, seed);
        }
        py::array_t<float> out({d, d});
        std::copy(rot.R.begin(), rot.R.end(), out.mutable_data());
        return out;
      },
      py::arg("d"), py::arg("seed") = 1234, "A random d x d orthogonal matrix (float32, row-major) for RaBitQ codes.");

  m.def(
      "rabitq_encode",
      [](py::array residuals, py::array rotation, int threads) -> py::tuple {
        check_array(residuals, "residuals", 'f', 4, 2, "float32");
        check_array(rotation, "rotation", 'f', 4, 2, "float32");
        const size_t n = static_cast<size_t>(residuals.shape(0)), d = static_cast<size_t>(residuals.shape(1));
        if (d < 2 || static_cast<size_t>(rotation.shape(0)) != d || static_cast<size_t>(rotation.shape(1)) != d)
          fail_value("rotation must be (" + std::to_string(d) + ", " + std::to_string(d) + ") for residuals of " +
                     std::to_string(d) + " columns");
        if (threads < 0) fail_value("threads must be >= 0 (0 = automatic), got " + std::to_string(threads));
        dense::RabitqRotation rot;
        rot.d = d;
        const float* pr = static_cast<const float*>(rotation.data());
        rot.R.assign(pr, pr + d * d);
        const size_t words = dense::rabitq_words(d);
        py::array_t<uint64_t> bits({n, words});
        py::array_t<float> norm(n), ipq(n);
        const float* px = static_cast<const float*>(residuals.data());
        uint64_t* pb = bits.mutable_data();
        float* pn = norm.mutable_data();
        float* pi = ipq.mutable_data();
        {
          py::gil_scoped_release release;
          dense::encode_rabitq(rot, px, n, pb, pn, pi, threads);
        }
        return py::make_tuple(bits, norm, ipq);
      },
      py::arg("residuals"), py::arg("rotation"), py::arg("threads") = 0,
      "RaBitQ codes of residual rows: (bits uint64 (n, ceil(d / 64)), norm float32 (n,), ipq float32 (n,)); "
      "rows encoded on `threads` workers (0: one per CPU), the same codes for any count.");

  m.def(
      "ivf_rabitq_search",
      [](py::array centroids, py::array rotation, py::array rot_centroids, py::array bits, py::array norm,
         py::array ipq, py::array cdot, py::array start, py::array lens, py::array exact, py::array Q, size_t k,
         size_t nprobe, size_t rerank, int threads, py::object allowed, py::object coarse) -> py::tuple {
        check_array(centroids, "centroids", 'f', 4, 2, "float32");
        check_array(rotation, "rotation", 'f', 4, 2, "float32");
        check_array(rot_centroids, "rot_centroids", 'f', 4, 2, "float32");
        check_array(bits, "bits", 'u', 8, 2, "uint64");
        check_array(norm, "norm", 'f', 4, 1, "float32");
        check_array(ipq, "ipq", 'f', 4, 1, "float32");
        check_array(cdot, "cdot", 'f', 4, 1, "float32");
        check_array(start, "start", 'i', 8, 1, "int64");
        check_array(lens, "lens", 'i', 8, 1, "int64");
        check_array(exact, "exact", 'f', 4, 2, "float32");
        check_array(Q, "Q", 'f', 4, 2, "float32");
        const size_t d = static_cast<size_t>(centroids.shape(1)), nlist = static_cast<size_t>(centroids.shape(0));
        const size_t n = static_cast<size_t>(exact.shape(0));
        if (d < 2 || static_cast<size_t>(rotation.shape(0)) != d || static_cast<size_t>(rotation.shape(1)) != d ||
            static_cast<size_t>(exact.shape(1)) != d || static_cast<size_t>(Q.shape(1)) != d)
          fail_value("rotation must be (d, d) and exact and Q have d columns, d = " + std::to_string(d));
        if (rot_centroids.shape(0) != centroids.shape(0) || rot_centroids.shape(1) != centroids.shape(1))
          fail_value("rot_centroids must have the shape of centroids");
        if (static_cast<size_t>(bits.shape(0)) != n || static_cast<size_t>(bits.shape(1)) != dense::rabitq_words(d) ||
            static_cast<size_t>(norm.shape(0)) != n || static_cast<size_t>(ipq.shape(0)) != n ||
            static_cast<size_t>(cdot.shape(0)) != n)
          fail_value("bits, norm, ipq and cdot must have one row per row of exact (bits ceil(d / 64) words)");
        if (static_cast<size_t>(start.shape(0)) != nlist || static_cast<size_t>(lens.shape(0)) != nlist)
          fail_value("start and lens must have one entry per centroid");
        if (threads < 0) fail_value("threads must be >= 0 (0 = automatic)");
        py::array allowed_a;
        const uint8_t* al = allowed_mask(allowed, n, allowed_a);
        dense::IvfRabitqView v;
        v.d = d;
        v.centroids = static_cast<const float*>(centroids.data());
        v.nlist = nlist;
        v.rotation = static_cast<const float*>(rotation.data());
        v.rot_centroids = static_cast<const float*>(rot_centroids.data());
        v.bits = static_cast<const uint64_t*>(bits.data());
        v.norm = static_cast<const float*>(norm.data());
        v.ipq = static_cast<const float*>(ipq.data());
        v.cdot = static_cast<const float*>(cdot.data());
        v.start = static_cast<const int64_t*>(start.data());
        v.len = static_cast<const int64_t*>(lens.data());
        v.exact = static_cast<const float*>(exact.data());
        v.allowed = al;
        v.n_rows = n;
        v.coarse = coarse_of(coarse, centroids);
        const size_t nq = static_cast<size_t>(Q.shape(0));
        py::array_t<int64_t> out_pos({nq, k});
        py::array_t<float> out_scores({nq, k});
        py::array_t<int64_t> out_stats({nq, size_t(3)});
        int64_t* op = out_pos.mutable_data();
        float* os = out_scores.mutable_data();
        int64_t* ost = out_stats.mutable_data();
        const float* pq_ = static_cast<const float*>(Q.data());
        {
          py::gil_scoped_release release;
          std::fill(op, op + nq * k, int64_t(-1));
          std::fill(os, os + nq * k, std::numeric_limits<float>::quiet_NaN());
          common::parallel_for(nq, common::resolve_threads(threads, nq), [&](size_t i, int) {
            dense::RabitqSearchStats st;
            dense::ivf_rabitq_search_one(v, pq_ + i * d, k, nprobe, rerank, op + i * k, os + i * k, &st);
            ost[i * 3] = static_cast<int64_t>(st.scanned);
            ost[i * 3 + 1] = static_cast<int64_t>(st.pooled);
            ost[i * 3 + 2] = static_cast<int64_t>(st.rescored);
          });
        }
        return py::make_tuple(out_pos, out_scores, out_stats);
      },
      py::arg("centroids"), py::arg("rotation"), py::arg("rot_centroids"), py::arg("bits"), py::arg("norm"),
      py::arg("ipq"), py::arg("cdot"), py::arg("start"), py::arg("lens"), py::arg("exact"), py::arg("Q"), py::arg("k"),
      py::arg("nprobe"), py::arg("rerank"), py::arg("threads") = 0, py::arg("allowed") = py::none(),
      py::arg("coarse") = py::none(),
      "IVF-RaBitQ search by inner product (q . c + c . r exact, (q - c) . r estimated from the code with "
      "the query residual quantised to 4 bits; rot_centroids = centroids @ rotation.T, cdot = centroid . "
      "residual per row; then exact re-scoring of the k * rerank best in "
      "upper-bound order until no bound reaches the k-th score): (positions (nq, k) padded with -1, "
      "scores (nq, k) padded with NaN, stats (nq, 3): rows estimated, candidates pooled, rows re-scored); coarse "
      "(coarse_centroids(centroids)) picks the same lists faster.");

  m.def(
      "rabitq_scan",
      [](py::array codes, py::array planes) -> py::tuple {
        check_array(codes, "codes", 'u', 8, 2, "uint64");
        check_array(planes, "planes", 'u', 8, 2, "uint64");
        const size_t n = static_cast<size_t>(codes.shape(0)), words = static_cast<size_t>(codes.shape(1));
        if (planes.shape(0) != 4 || static_cast<size_t>(planes.shape(1)) != words)
          fail_value("planes must be (4, " + std::to_string(words) + ") for codes of that many words");
        py::array_t<uint32_t> sums(n), pops(n);
        const auto* pc = static_cast<const uint64_t*>(codes.data());
        const auto* pp = static_cast<const uint64_t*>(planes.data());
        uint32_t* ps = sums.mutable_data();
        uint32_t* po = pops.mutable_data();
        {
          py::gil_scoped_release release;
          dense::rabitq_scan_kernels().scan(pc, n, words, pp, ps, po);
        }
        return py::make_tuple(sums, pops);
      },
      py::arg("codes"), py::arg("planes"),
      "The RaBitQ bit-plane scan at the active SIMD level: (sums uint32 (n,): sum over b of 2^b * "
      "popcount(code & planes[b]), pops uint32 (n,): popcount(code)).");

  m.def(
      "rabitq_kernel_name", [] { return std::string(dense::rabitq_scan_kernels().name); },
      "The SIMD level of the RaBitQ bit-plane scan kernel in use.");

  m.def(
      "pq4_kernel_name", [] { return std::string(dense::pq4_scan_kernels().name); },
      "The SIMD level of the 4-bit fast-scan kernel in use.");
}

}  // namespace ragfind::bindings
