// Checks every SIMD level this CPU runs (scalar, AVX2, AVX-512 on x86; NEON on AArch64) for the
// similarity kernels, MaxSim and the impact-column kernels: each level against a float64
// reference, and each level above scalar against the scalar one. The C++-only counterpart of
// tests/dense/test_dense_kernels.py and tests/late/test_maxsim.py; built by ctest
// (-DRAGFIND_BUILD_TESTS=ON) and, cross-compiled for AArch64 and run under qemu-aarch64, by
// tools/neon/run.sh, the one way to reach the NEON kernels from an x86 machine.
//
// Inputs sit at the very end of an mmap'ed region followed by a PROT_NONE page, so a kernel
// that reads or writes one element past a row, an output or a document faults at once.
// Tolerances are the Python tests': float32 dots within 2e-6 * sum|a_k b_k| * max(1, sqrt(d)/4)
// of float64 (twice that against scalar), L2 within rtol 2e-5 * max(1, d/64) + 1e-5, int8
// exactly equal, MaxSim scores within rtol 1e-5 + atol 1e-4 * sqrt(dim) * m / 10 (float16
// documents: 1e-4) of float64 and per-token maxima within 1e-5 relative + 1e-4 of scalar.
// Exit status: 0 when every case passes, 1 on any mismatch, 2 on a setup error.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ragfind/common/cpu.hpp"
#include "ragfind/dense/nearest.hpp"
#include "ragfind/dense/pq.hpp"
#include "ragfind/dense/similarity.hpp"
#include "ragfind/late/maxsim.hpp"
#include "ragfind/splade/impact_columns.hpp"

using namespace ragfind;
using namespace ragfind::common;
using namespace ragfind::dense;
using namespace ragfind::splade;

namespace {

// ---- bookkeeping -------------------------------------------------------------------------

struct Stat {
  long cases = 0, failures = 0;
  double max_abs = 0, max_ratio = 0;  // largest |got - want| and largest |got - want| / tol
};
std::map<std::string, Stat> g_stats;
long g_failures = 0;

// One compared value; tol = 0 means exact equality.
void check(const std::string& kernel, const std::string& where, double got, double want, double tol) {
  Stat& s = g_stats[kernel];
  ++s.cases;
  const double err = std::fabs(got - want);
  const bool ok = tol == 0 ? got == want : err <= tol;
  if (std::isfinite(err)) {
    s.max_abs = std::max(s.max_abs, err);
    if (tol > 0) s.max_ratio = std::max(s.max_ratio, err / tol);
  }
  if (!ok) {
    ++s.failures;
    if (++g_failures <= 20)
      std::printf("MISMATCH %s %s: got %.9g want %.9g (|err| %.3g, tol %.3g)\n", kernel.c_str(), where.c_str(), got,
                  want, err, tol);
  }
}

void check_true(const std::string& kernel, const std::string& where, bool ok) {
  check(kernel, where, ok ? 1 : 0, 1, 0);
}

std::string ctx(const char* fmt, long a, long b = -1, long c = -1) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

// ---- memory that faults right after its last element -------------------------------------

template <class T>
class Guarded {
 public:
  explicit Guarded(size_t n) : n_(n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = n * sizeof(T);
    data_pages_ = (bytes + page - 1) / page * page;
    map_bytes_ = data_pages_ + page;
    void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::perror("mmap");
      std::exit(2);
    }
    base_ = static_cast<char*>(m);
    if (mprotect(base_ + data_pages_, page, PROT_NONE) != 0) {
      std::perror("mprotect");
      std::exit(2);
    }
    ptr_ = reinterpret_cast<T*>(base_ + data_pages_ - bytes);  // ends at the guard page
  }
  ~Guarded() { munmap(base_, map_bytes_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  T* data() { return ptr_; }
  T& operator[](size_t i) { return ptr_[i]; }
  size_t size() const { return n_; }

 private:
  size_t n_, data_pages_ = 0, map_bytes_ = 0;
  char* base_ = nullptr;
  T* ptr_ = nullptr;
};

// ---- data ---------------------------------------------------------------------------------

std::mt19937_64 g_rng(20261201);

void fill_normal(float* p, size_t n) {
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < n; ++i) p[i] = nd(g_rng);
}

// float -> IEEE binary16 bits, round to nearest even (the generator for float16 inputs).
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504
  if (ax < 0x38800000u) {                        // below 2^-14: a subnormal half (or zero)
    float a;
    std::memcpy(&a, &ax, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));  // units of 2^-24
  }
  uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
  const uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

double tol_dot(const float* a, const float* b, size_t d) {  // tests/dense/test_dense_kernels.py::_tol
  double s = 0;
  for (size_t k = 0; k < d; ++k) s += std::fabs(static_cast<double>(a[k]) * b[k]);
  return 2e-6 * s * std::max(1.0, std::sqrt(static_cast<double>(d)) / 4);
}

double tol_l2(double ref, size_t d) { return 2e-5 * std::max(1.0, d / 64.0) * std::fabs(ref) + 1e-5; }

// ---- similarity kernels ------------------------------------------------------------------

const size_t kDims[] = {1,  2,  3,  4,  5,  6,  7,   8,   9,   12,  15,   16,  17,
                        31, 32, 33, 63, 64, 65, 100, 127, 384, 385, 1536, 1537};
const size_t kRows[] = {1, 2, 3, 4, 5, 7, 8, 13};

void check_f32(const SimilarityKernels& K, const SimilarityKernels& S) {
  const std::string lv = K.name;
  for (size_t d : kDims) {
    for (size_t n : kRows) {
      Guarded<float> X(n * d), q(d), ip(n), l2(n);
      fill_normal(X.data(), n * d);
      fill_normal(q.data(), d);
      K.dot_rows_f32(q.data(), X.data(), n, d, ip.data());
      K.l2_rows_f32(q.data(), X.data(), n, d, l2.data());
      std::vector<float> sip(n), sl2(n);
      S.dot_rows_f32(q.data(), X.data(), n, d, sip.data());
      S.l2_rows_f32(q.data(), X.data(), n, d, sl2.data());
      for (size_t i = 0; i < n; ++i) {
        const float* x = X.data() + i * d;
        double rip = 0, rl2 = 0, nx = 0, nq = 0;
        for (size_t k = 0; k < d; ++k) {
          rip += static_cast<double>(q[k]) * x[k];
          rl2 += (static_cast<double>(q[k]) - x[k]) * (static_cast<double>(q[k]) - x[k]);
          nx += static_cast<double>(x[k]) * x[k];
          nq += static_cast<double>(q[k]) * q[k];
        }
        const double t = tol_dot(q.data(), x, d);
        const std::string w = ctx("d=%ld n=%ld row=%ld", d, n, i);
        check(lv + " dot_rows_f32", w, ip[i], rip, t);
        if (&K != &S) check(lv + " dot_rows_f32 vs scalar", w, ip[i], sip[i], 2 * t);
        check(lv + " l2_rows_f32", w, l2[i], rl2, tol_l2(rl2, d));
        if (&K != &S) check(lv + " l2_rows_f32 vs scalar", w, l2[i], sl2[i], 2 * tol_l2(rl2, d));
        if (n == 1) {  // the pair kernels, and cosine as the Python layer computes it from them
          const float dt = K.dot_f32(q.data(), x, d);
          check(lv + " dot_f32", w, dt, rip, t);
          if (&K != &S) check(lv + " dot_f32 vs scalar", w, dt, S.dot_f32(q.data(), x, d), 2 * t);
          const float l = K.l2sq_f32(q.data(), x, d);
          check(lv + " l2sq_f32", w, l, rl2, tol_l2(rl2, d));
          if (&K != &S) check(lv + " l2sq_f32 vs scalar", w, l, S.l2sq_f32(q.data(), x, d), 2 * tol_l2(rl2, d));
          const double cos = dt / (std::sqrt(static_cast<double>(K.dot_f32(q.data(), q.data(), d))) *
                                   std::sqrt(static_cast<double>(K.dot_f32(x, x, d))));
          check(lv + " cosine (from dot_f32)", w, cos, rip / std::sqrt(nq * nx), 1e-5);
        }
      }
    }
  }
}

void check_f16(const SimilarityKernels& K, const SimilarityKernels& S) {
  const std::string lv = K.name;
  // Decoding: every one of the 65536 bit patterns, against the exact scalar decoder.
  {
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
    std::vector<float> got(65536);
    K.f16_to_f32(all.data(), got.data(), all.size());
    for (uint32_t h = 0; h < 65536; ++h) {
      const float want = half_to_float(static_cast<uint16_t>(h));
      const bool ok = std::isnan(want) ? std::isnan(got[h]) && std::signbit(got[h]) == std::signbit(want)
                                       : std::memcmp(&got[h], &want, 4) == 0;
      check_true(lv + " f16_to_f32 (all 65536)", ctx("h=0x%lx", h), ok);
    }
    for (size_t n = 0; n <= 40; ++n) {  // tails
      Guarded<uint16_t> in(n);
      Guarded<float> out(n);
      for (size_t j = 0; j < n; ++j) in[j] = all[(j * 2654435761u) & 0xffffu] & 0x7bffu;  // finite
      K.f16_to_f32(in.data(), out.data(), n);
      for (size_t j = 0; j < n; ++j)
        check(lv + " f16_to_f32 (lengths 0..40)", ctx("n=%ld j=%ld", n, j), out[j], half_to_float(in[j]), 0);
    }
  }
  // Scans.
  for (size_t d : kDims) {
    for (size_t n : kRows) {
      std::vector<float> Xf(n * d);
      fill_normal(Xf.data(), Xf.size());
      Guarded<uint16_t> H(n * d);
      Guarded<float> q(d), ip(n), l2(n);
      fill_normal(q.data(), d);
      std::vector<float> Hd(n * d);
      for (size_t k = 0; k < n * d; ++k) {
        H[k] = float_to_half(Xf[k]);
        Hd[k] = half_to_float(H[k]);
      }
      K.dot_rows_f16(q.data(), H.data(), n, d, ip.data());
      K.l2_rows_f16(q.data(), H.data(), n, d, l2.data());
      std::vector<float> sip(n), sl2(n);
      S.dot_rows_f16(q.data(), H.data(), n, d, sip.data());
      S.l2_rows_f16(q.data(), H.data(), n, d, sl2.data());
      for (size_t i = 0; i < n; ++i) {
        const float* x = Hd.data() + i * d;
        double rip = 0, rl2 = 0;
        for (size_t k = 0; k < d; ++k) {
          rip += static_cast<double>(q[k]) * x[k];
          rl2 += (static_cast<double>(q[k]) - x[k]) * (static_cast<double>(q[k]) - x[k]);
        }
        const double t = tol_dot(q.data(), x, d);
        const std::string w = ctx("d=%ld n=%ld row=%ld", d, n, i);
        check(lv + " dot_rows_f16", w, ip[i], rip, t);
        if (&K != &S) check(lv + " dot_rows_f16 vs scalar", w, ip[i], sip[i], 2 * t);
        check(lv + " l2_rows_f16", w, l2[i], rl2, tol_l2(rl2, d));
        if (&K != &S) check(lv + " l2_rows_f16 vs scalar", w, l2[i], sl2[i], 2 * tol_l2(rl2, d));
      }
    }
  }
  // Special values through the scan (tests/dense/test_dense_kernels.py::test_f16_special_values):
  // with q a unit vector the score is the decoded value, exactly.
  const float specials[] = {0.0f, -0.0f, 6e-8f, -6e-8f, 1e-5f, 65504.0f, -65504.0f, 1.0f, 0.333f, 0x1p-14f, 0x1p-24f};
  const size_t d = 2 * (sizeof specials / sizeof specials[0]);
  for (size_t n : {size_t(1), size_t(5)}) {
    Guarded<uint16_t> H(n * d);
    for (size_t k = 0; k < n * d; ++k) H[k] = float_to_half(specials[k % (d / 2)]);
    for (size_t j = 0; j < d; ++j) {
      Guarded<float> q(d), out(n);
      for (size_t k = 0; k < d; ++k) q[k] = k == j ? 1.f : 0.f;
      K.dot_rows_f16(q.data(), H.data(), n, d, out.data());
      for (size_t i = 0; i < n; ++i)
        check(lv + " dot_rows_f16 special values", ctx("n=%ld j=%ld row=%ld", n, j, i), out[i],
              half_to_float(H[i * d + j]), 0);
    }
  }
}

void check_i8(const SimilarityKernels& K, const SimilarityKernels& S) {
  const std::string lv = K.name;
  std::vector<size_t> dims(std::begin(kDims), std::end(kDims));
  for (size_t d : {size_t(4095), size_t(4096), size_t(4097), size_t(4096 * 2 + 37), size_t(4096 * 3 + 16)})
    dims.push_back(d);  // across the int32 chunk (kI8ChunkElems)
  std::uniform_int_distribution<int> xi(-127, 127), qi(-16383, 16383);
  for (size_t d : dims) {
    for (size_t n : kRows) {
      if (d > 4096 && n > 5) continue;
      Guarded<int8_t> X(n * d);
      Guarded<int16_t> q(d);
      Guarded<float> out(n);
      for (size_t k = 0; k < n * d; ++k) X[k] = static_cast<int8_t>(xi(g_rng));
      for (size_t k = 0; k < d; ++k) q[k] = static_cast<int16_t>(qi(g_rng));
      q[0] = 16383;
      // Extremes: the int32 partial sums must not overflow and must stay exact.
      if (n >= 2) {
        for (size_t k = 0; k < d; ++k) X[k] = 127;
        for (size_t k = 0; k < d; ++k) X[d + k] = -128;  // beyond the documented |x| <= 127, still exact
      }
      if (n >= 5 && d > 4096) {  // worst case: every product 127 * 16383 (and its negation)
        for (size_t k = 0; k < d; ++k) q[k] = 16383;
        for (size_t k = 0; k < d; ++k) X[2 * d + k] = static_cast<int8_t>(k & 1 ? 127 : -127);
      }
      K.dot_rows_i8(q.data(), X.data(), n, d, out.data());
      std::vector<float> sc(n);
      S.dot_rows_i8(q.data(), X.data(), n, d, sc.data());
      for (size_t i = 0; i < n; ++i) {
        int64_t ref = 0;
        for (size_t k = 0; k < d; ++k) ref += static_cast<int64_t>(q[k]) * X[i * d + k];
        const std::string w = ctx("d=%ld n=%ld row=%ld", d, n, i);
        check(lv + " dot_rows_i8 (exact)", w, out[i], static_cast<float>(ref), 0);
        if (&K != &S) check(lv + " dot_rows_i8 vs scalar (exact)", w, out[i], sc[i], 0);
      }
    }
  }
  for (size_t n = 0; n <= 40; ++n) {
    Guarded<int8_t> in(n);
    Guarded<float> out(n);
    for (size_t j = 0; j < n; ++j) in[j] = static_cast<int8_t>(j * 37 + 128);
    K.i8_to_f32(in.data(), out.data(), n);
    for (size_t j = 0; j < n; ++j)
      check(lv + " i8_to_f32", ctx("n=%ld j=%ld", n, j), out[j], static_cast<float>(in[j]), 0);
  }
  {
    Guarded<int8_t> in(256);
    Guarded<float> out(256);
    for (int v = 0; v < 256; ++v) in[v] = static_cast<int8_t>(v - 128);
    K.i8_to_f32(in.data(), out.data(), 256);
    for (int v = 0; v < 256; ++v) check(lv + " i8_to_f32", ctx("v=%ld", v - 128), out[v], v - 128, 0);
  }
}

void check_tile(const SimilarityKernels& K) {
  const std::string lv = K.name;
  const float kUntouched = -12345.5f;
  for (size_t d : {1, 3, 4, 5, 7, 8, 16, 17, 100, 384, 1536}) {
    for (size_t nq : {1, 2, 3, 4, 5, 8, 9}) {
      for (size_t nx : {1, 2, 3, 4, 5, 7, 8, 11}) {
        const size_t ldo = nx + 3;
        Guarded<float> Q(nq * d), X(nx * d), out(nq * ldo);
        fill_normal(Q.data(), nq * d);
        fill_normal(X.data(), nx * d);
        for (size_t k = 0; k < nq * ldo; ++k) out[k] = kUntouched;
        K.dot_tile_f32(Q.data(), nq, X.data(), nx, d, out.data(), ldo);
        for (size_t i = 0; i < nq; ++i) {
          for (size_t j = 0; j < ldo; ++j) {
            const std::string w = ctx("d=%ld q=%ld x=%ld", d, i, j) + ctx(" nq=%ld nx=%ld", nq, nx);
            if (j >= nx) {
              check(lv + " dot_tile_f32 leaves ldo padding alone", w, out[i * ldo + j], kUntouched, 0);
              continue;
            }
            double ref = 0;
            for (size_t k = 0; k < d; ++k) ref += static_cast<double>(Q[i * d + k]) * X[j * d + k];
            // tests/dense/test_dense_kernels.py::test_pairwise_tile_matches_numpy
            const double tol = 2 * tol_dot(Q.data() + i * d, X.data() + j * d, d) + 1e-7;
            check(lv + " dot_tile_f32", w, out[i * ldo + j], ref, tol);
          }
        }
      }
    }
  }
}

// ---- 4-bit PQ fast scan -------------------------------------------------------------------

// Every level's 8-bit float-table sums equal a float32 loop in order of the sub-spaces, bit for
// bit (the contract), for row counts around the kernel's groups of four.
void check_pq8(const dense::Pq4ScanKernels& K) {
  const std::string lv = std::string(K.name) + " pq8_scan";
  std::uniform_int_distribution<int> code(0, 255);
  std::normal_distribution<float> g(0.f, 1.f);
  for (size_t m : {1, 3, 16, 48, 256})
    for (size_t n : {0, 1, 3, 4, 5, 33}) {
      std::vector<uint8_t> codes(n * m);
      for (auto& c : codes) c = static_cast<uint8_t>(code(g_rng));
      std::vector<float> lut(m * 256);
      for (auto& v : lut) v = g(g_rng);
      Guarded<float> out(n + 1);
      K.scan8(codes.data(), n, m, lut.data(), out.data());
      for (size_t i = 0; i < n; ++i) {
        float want = 0.f;
        for (size_t j = 0; j < m; ++j) want += lut[j * 256 + codes[i * m + j]];
        check(lv, ctx("m=%ld n=%ld row=%ld", m, n, i), out[i], want, 0);
      }
    }
}

// Every level's integer sums equal a direct loop over the unpacked codes (exactly: the sums are
// integers below 2^16), for m not a multiple of 4, partial last blocks and the largest bytes.
void check_pq4(const dense::Pq4ScanKernels& K) {
  const std::string lv = std::string(K.name) + " pq4_scan";
  std::uniform_int_distribution<int> code(0, 15), byte(0, 255);
  for (size_t m : {1, 3, 4, 8, 13, 48, 96, 256})
    for (size_t n : {1, 31, 32, 33, 100}) {
      const size_t mpad = dense::pq4_mpad(m), nb = (n + dense::kPqBlock - 1) / dense::kPqBlock;
      std::vector<uint8_t> codes(n * m);
      for (auto& c : codes) c = static_cast<uint8_t>(code(g_rng));
      std::vector<float> lut(m * 16);
      for (auto& v : lut) v = static_cast<float>(byte(g_rng));
      if (m == 256)  // row 0 reaches the largest sum, 256 * 255
        for (size_t j = 0; j < m; ++j) {
          lut[j * 16] = 0.f;
          lut[j * 16 + 15] = 255.f;
          codes[j] = 15;
        }
      const dense::Pq4Lut q = dense::quantise_pq4_lut(lut.data(), m);
      Guarded<uint8_t> blocks(nb * mpad * 16);
      dense::pack_pq4(codes.data(), n, m, blocks.data());
      Guarded<uint16_t> out(nb * dense::kPqBlock);
      K.scan(blocks.data(), nb, mpad, q.lut8.data(), out.data());
      for (size_t i = 0; i < n; ++i) {
        uint32_t want = 0;
        for (size_t j = 0; j < m; ++j) want += q.lut8[j * 16 + codes[i * m + j]];
        check(lv, ctx("m=%ld n=%ld row=%ld", m, n, i), out[i], want, 0);
        // The float score it stands for, within the quantisation bound of the float table's.
        double f = 0;
        for (size_t j = 0; j < m; ++j) f += lut[j * 16 + codes[i * m + j]];
        check(lv + " dequantised", ctx("m=%ld n=%ld row=%ld", m, n, i), q.bias + double(q.scale) * out[i], f,
              0.5 * q.scale * m + 1e-3 * std::fabs(f) + 1e-3);
      }
      uint32_t code0 = 0;  // padding rows hold code 0 in every sub-space
      for (size_t j = 0; j < m; ++j) code0 += q.lut8[j * 16];
      for (size_t i = n; i < nb * dense::kPqBlock; ++i)
        check(lv + " padding rows score as code 0", ctx("m=%ld n=%ld row=%ld", m, n, i), out[i], code0, 0);
    }
}

// ---- nearest centroid ---------------------------------------------------------------------

// N's nearest_f32 on n rows against nc centroids (bias: nullptr or nc values).
std::vector<int64_t> nearest(const NearestKernels& N, const float* X, size_t n, const float* C, size_t nc, size_t d,
                             const float* bias) {
  const CentroidPanels P = pack_centroids(N, C, nc, d, bias);
  std::vector<int64_t> out(n, -7);
  N.nearest_f32(X, n, P, out.data());
  return out;
}

// Levels above scalar must pick exactly the scalar level's centroids (the scores are the same
// fma chains); scalar's pick must score within float32 rounding of the float64 best.
void check_nearest(const NearestKernels& N, const NearestKernels& S) {
  const std::string lv = N.name;
  const bool ref = &N == &S;
  std::normal_distribution<float> nd(0.f, 1.f);
  struct Shape {
    size_t d, nc, n;
  };
  std::vector<Shape> shapes;
  for (size_t d : {1, 3, 4, 5, 8, 16, 17, 100, 384})
    for (size_t nc : {1, 2, 3, 7, 15, 16, 17, 31, 33, 47, 48, 49, 97})
      for (size_t n : {1, 7, 13, 64}) shapes.push_back({d, nc, n});
  // Several row blocks, and d past the kernels' dimension slice (partial sums parked and resumed).
  shapes.push_back({384, 100, 300});
  shapes.push_back({513, 50, 90});
  shapes.push_back({1536, 49, 100});
  for (const Shape& sh : shapes) {
    const size_t d = sh.d, nc = sh.nc, n = sh.n;
    Guarded<float> X(n * d), C(nc * d);
    fill_normal(X.data(), n * d);
    fill_normal(C.data(), nc * d);
    std::vector<float> bias(nc);
    for (float& b : bias) b = nd(g_rng) * static_cast<float>(std::sqrt(double(d)));
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      const float* bp = with_bias ? bias.data() : nullptr;
      const std::vector<int64_t> got = nearest(N, X.data(), n, C.data(), nc, d, bp);
      const std::vector<int64_t> want = ref ? got : nearest(S, X.data(), n, C.data(), nc, d, bp);
      for (size_t i = 0; i < n; ++i) {
        const std::string w = ctx("d=%ld nc=%ld row=%ld", d, nc, i) + (with_bias ? " bias" : "");
        if (!ref) {
          check(lv + " nearest_f32 == scalar", w, double(got[i]), double(want[i]), 0);
          continue;
        }
        check_true(lv + " nearest_f32 in range", w, got[i] >= 0 && got[i] < static_cast<int64_t>(nc));
        if (got[i] < 0 || got[i] >= static_cast<int64_t>(nc)) continue;
        double best = -1e300;
        size_t at = 0;
        for (size_t c = 0; c < nc; ++c) {
          double sc = bp ? bp[c] : 0.0;
          for (size_t k = 0; k < d; ++k) sc += double(X[i * d + k]) * C[c * d + k];
          if (sc > best) best = sc, at = c;
        }
        const size_t g = static_cast<size_t>(got[i]);
        double sg = bp ? bp[g] : 0.0;
        for (size_t k = 0; k < d; ++k) sg += double(X[i * d + k]) * C[g * d + k];
        const double tol = tol_dot(X.data() + i * d, C.data() + at * d, d) +
                           tol_dot(X.data() + i * d, C.data() + g * d, d) + 1e-6 * std::fabs(best) + 1e-7;
        check(lv + " nearest_f32 scores the float64 best", w, sg, best, tol);
      }
    }
  }
  // Ties: centroid c copies centroid c % m, so every best score is tied m apart, across lanes
  // and panels: the lowest copy must win. A NaN centroid never wins; a NaN row gets 0.
  for (size_t d : {3, 16, 384}) {
    const size_t m = 17, nc = 3 * m + 5, n = 40;
    Guarded<float> X(n * d), C(nc * d);
    fill_normal(X.data(), n * d);
    fill_normal(C.data(), m * d);
    for (size_t c = m; c < nc; ++c) std::memcpy(C.data() + c * d, C.data() + (c % m) * d, d * sizeof(float));
    const std::vector<int64_t> got = nearest(N, X.data(), n, C.data(), nc, d, nullptr);
    for (size_t i = 0; i < n; ++i)
      check_true(lv + " nearest_f32 ties go to the lowest centroid", ctx("d=%ld row=%ld", d, i),
                 got[i] >= 0 && got[i] < static_cast<int64_t>(m));
    for (size_t k = 0; k < d; ++k) C[k] = std::nanf("");
    for (size_t k = 0; k < d; ++k) X[k] = std::nanf("");
    const std::vector<int64_t> nan = nearest(N, X.data(), n, C.data(), nc, d, nullptr);
    check(lv + " nearest_f32 NaN row gets centroid 0", ctx("d=%ld", d), double(nan[0]), 0, 0);
    for (size_t i = 1; i < n; ++i)
      check_true(lv + " nearest_f32 NaN centroid never wins", ctx("d=%ld row=%ld", d, i),
                 nan[i] > 0 && nan[i] < static_cast<int64_t>(nc));
  }
}

// ---- MaxSim -------------------------------------------------------------------------------

const int64_t kLengths[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,  12, 13,
                            16, 17, 23, 24, 25, 47, 48, 49, 96, 97, 255, 600};

void check_maxsim(SimdLevel level) {
  const std::string lv = simd_level_name(level);
  const late::MaxSimF32Fn f32 = late::maxsim_f32_table().at(level);
  const late::MaxSimF16Fn f16 = late::maxsim_f16_table().at(level);
  const late::MaxSimF32Fn s32 = late::maxsim_f32_table().at(SimdLevel::Scalar);
  const late::MaxSimF16Fn s16 = late::maxsim_f16_table().at(SimdLevel::Scalar);
  const bool above_scalar = level != SimdLevel::Scalar;
  if (above_scalar) {
    check_true(lv + " maxsim tables registered", "f32", f32 != s32);
    check_true(lv + " maxsim tables registered", "f16", f16 != s16);
  }
  for (int64_t dim : {64, 96, 128, 384, 1, 7, 100}) {
    for (int64_t m : {1, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 45, 70}) {
      if (dim == 384 && m > 33) continue;  // keeps the emulated run short; 64..128 cover the panels
      std::vector<float> q(m * dim);
      fill_normal(q.data(), q.size());
      const std::vector<float> panels = late::pack_query(q.data(), m, dim);
      const int64_t padded = static_cast<int64_t>(panels.size()) / dim;
      std::vector<float> qn = q;  // float16 documents are scored against unit query rows
      for (int64_t i = 0; i < m; ++i) {
        double s = 0;
        for (int64_t k = 0; k < dim; ++k) s += static_cast<double>(qn[i * dim + k]) * qn[i * dim + k];
        for (int64_t k = 0; k < dim; ++k) qn[i * dim + k] = static_cast<float>(qn[i * dim + k] / std::sqrt(s));
      }
      const std::vector<float> panels_n = late::pack_query(qn.data(), m, dim);
      std::vector<float> scratch(late::kF16Block * dim), sscratch(late::kF16Block * dim), smax(padded);
      for (int64_t n : kLengths) {
        for (int dt = 0; dt < 2; ++dt) {
          const bool half = dt == 1;
          const std::vector<float>& qq = half ? qn : q;
          std::vector<float> docf(n * dim);
          fill_normal(docf.data(), docf.size());
          Guarded<float> doc32(half ? 0 : n * dim);
          Guarded<uint16_t> doc16(half ? n * dim : 0);
          for (int64_t k = 0; k < n * dim; ++k) {
            if (half) {
              doc16[k] = float_to_half(docf[k]);
              docf[k] = half_to_float(doc16[k]);
            } else {
              doc32[k] = docf[k];
            }
          }
          Guarded<float> maxima(padded);
          if (half) {
            f16(panels_n.data(), m, dim, doc16.data(), n, maxima.data(), scratch.data());
            s16(panels_n.data(), m, dim, doc16.data(), n, smax.data(), sscratch.data());
          } else {
            f32(panels.data(), m, dim, doc32.data(), n, maxima.data());
            s32(panels.data(), m, dim, doc32.data(), n, smax.data());
          }
          const std::string name = lv + (half ? " maxsim_f16" : " maxsim_f32");
          const std::string w = ctx("dim=%ld m=%ld n=%ld", dim, m, n);
          double ref_score = 0;
          for (int64_t i = 0; i < m; ++i) {
            double best = -INFINITY;
            for (int64_t t = 0; t < n; ++t) {
              double s = 0;
              for (int64_t k = 0; k < dim; ++k) s += static_cast<double>(qq[i * dim + k]) * docf[t * dim + k];
              best = std::max(best, s);
            }
            ref_score += best;
            if (above_scalar)
              check(name + " per-token max vs scalar", w + ctx(" tok=%ld", i), maxima[i], smax[i],
                    1e-5 * std::fabs(smax[i]) + 1e-4);
          }
          for (int64_t i = m; i < padded; ++i)
            check(name + " padding lanes are 0", w + ctx(" lane=%ld", i), maxima[i], 0, 0);
          // tests/late/test_maxsim.py: score sums (float32 like maxsim_batch) against float64.
          float fsum = 0;
          for (int64_t i = 0; i < m; ++i) fsum += maxima[i];
          const double atol = half ? 1e-4 : 1e-4 * std::sqrt(static_cast<double>(dim)) * m / 10;
          check(name + " score vs float64", w, fsum, ref_score, 1e-5 * std::fabs(ref_score) + atol);
        }
      }
    }
  }
}

// maxsim_batch through the dispatch, several threads, at `level` vs the scalar level.
void check_maxsim_batch(SimdLevel level) {
  const std::string lv = simd_level_name(level);
  const int64_t m = 45, dim = 100;
  std::vector<float> q(m * dim);
  fill_normal(q.data(), q.size());
  std::vector<std::vector<float>> docs32;
  std::vector<std::vector<uint16_t>> docs16;
  std::vector<int64_t> lens;
  for (int64_t n : kLengths) {
    lens.push_back(n);
    docs32.emplace_back(n * dim);
    fill_normal(docs32.back().data(), n * dim);
    docs16.emplace_back(n * dim);
    for (int64_t k = 0; k < n * dim; ++k) docs16.back()[k] = float_to_half(docs32.back()[k]);
  }
  const int64_t nd = static_cast<int64_t>(lens.size());
  std::vector<const void*> p32(nd), p16(nd);
  for (int64_t i = 0; i < nd; ++i) {
    p32[i] = docs32[i].data();
    p16[i] = docs16[i].data();
  }
  const SimdLevel before = active_simd_level();
  for (int dt = 0; dt < 2; ++dt) {
    const auto dtype = dt ? late::TokenDType::F16 : late::TokenDType::F32;
    const void* const* p = dt ? p16.data() : p32.data();
    std::vector<float> got(nd), want(nd);
    set_simd_level(SimdLevel::Scalar);
    late::maxsim_batch(q.data(), m, dim, p, lens.data(), nd, dtype, want.data(), 3, true);
    set_simd_level(level);
    const late::NonFinite bad = late::maxsim_batch(q.data(), m, dim, p, lens.data(), nd, dtype, got.data(), 3, true);
    check_true(lv + " maxsim_batch (3 threads)", "no non-finite", bad.doc == -1);
    for (int64_t i = 0; i < nd; ++i)
      check(lv + " maxsim_batch (3 threads) vs scalar", ctx("dtype=%ld doc=%ld", dt, i), got[i], want[i],
            1e-5 * std::fabs(want[i]) + 1e-4);
  }
  set_simd_level(before);
}

// The learned-sparse tile kernels must equal the scalar level bit for bit (the index promises
// identical scores on every path): column sums over 1..23 columns and tile lengths around every
// block size, list scatters that stop at the tile end, and threshold scans.
void check_impact(SimdLevel level) {
  const std::string lv = simd_level_name(level);
  const SimdLevel before = active_simd_level();
  set_simd_level(SimdLevel::Scalar);
  const ImpactColumnKernels S = impact_column_kernels();
  set_simd_level(level);
  const ImpactColumnKernels K = impact_column_kernels();
  set_simd_level(before);
  if (level != SimdLevel::Scalar) check_true(lv + " impact kernels registered", "", K.sum_columns != S.sum_columns);
  std::uniform_int_distribution<int> small(0, 900), any(0, 65535);
  std::uniform_real_distribution<float> weight(1e-3f, 3.0f);
  for (uint32_t m : {1u, 2u, 3u, 8u, 23u}) {
    for (uint32_t n : {1u, 3u, 15u, 16u, 17u, 31u, 32u, 33u, 63u, 64u, 65u, 100u, 257u, 4096u}) {
      for (uint32_t from : {0u, 5u}) {
        // Each column ends at a guard page right after the last element the kernel may read.
        std::vector<std::unique_ptr<Guarded<uint16_t>>> cols;
        std::vector<const uint16_t*> ptrs;
        std::vector<float> w(m);
        for (uint32_t c = 0; c < m; ++c) {
          cols.push_back(std::make_unique<Guarded<uint16_t>>(from + n));
          for (uint32_t i = 0; i < from + n; ++i)
            (*cols.back())[i] = static_cast<uint16_t>(c % 3 ? small(g_rng) : any(g_rng));
          ptrs.push_back(cols.back()->data());
          w[c] = weight(g_rng) / 100.0f;
        }
        Guarded<float> got(n);
        std::vector<float> want(n);
        S.sum_columns(want.data(), ptrs.data(), w.data(), m, from, n);
        K.sum_columns(got.data(), ptrs.data(), w.data(), m, from, n);
        for (uint32_t i = 0; i < n; ++i)
          check(lv + " impact sum_columns vs scalar (exact)", ctx("m=%ld n=%ld i=%ld", m, n, i), got[i], want[i], 0);
      }
    }
  }
  for (uint32_t len : {1u, 7u, 16u, 17u, 100u, 1000u}) {
    for (int stop_inside = 0; stop_inside < 2; ++stop_inside) {
      const uint32_t lo = 4096, hi = lo + 4096;
      // Sorted distinct docs from lo; with stop_inside, the last quarter lies past hi.
      std::vector<uint32_t> pick;
      uint32_t d = lo + static_cast<uint32_t>(small(g_rng) % 7);
      for (uint32_t j = 0; j < len; ++j) {
        pick.push_back(d);
        d += 1 + static_cast<uint32_t>(small(g_rng) % (stop_inside ? 4 : 3));
        if (!stop_inside && d >= hi) break;
      }
      if (stop_inside)
        for (uint32_t j = static_cast<uint32_t>(pick.size() * 3 / 4); j < pick.size(); ++j) pick[j] += 4096;
      std::sort(pick.begin(), pick.end());
      pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
      Guarded<uint32_t> docs(pick.size()), stored(pick.size());
      for (size_t j = 0; j < pick.size(); ++j) {
        docs[j] = pick[j];
        stored[j] = static_cast<uint32_t>(any(g_rng));
      }
      std::vector<float> want(4096), got_v(4096);
      for (uint32_t i = 0; i < 4096; ++i) want[i] = got_v[i] = static_cast<float>(small(g_rng)) * 0.01f;
      Guarded<float> got(4096);
      std::memcpy(got.data(), got_v.data(), 4096 * sizeof(float));
      const float wt = weight(g_rng) / 100.0f;
      const uint64_t a = S.scatter_add(want.data(), docs.data(), stored.data(), 0, pick.size(), lo, hi, wt);
      const uint64_t b = K.scatter_add(got.data(), docs.data(), stored.data(), 0, pick.size(), lo, hi, wt);
      check(lv + " impact scatter_add stop vs scalar", ctx("len=%ld inside=%ld", len, stop_inside), double(b),
            double(a), 0);
      for (uint32_t i = 0; i < 4096; ++i)
        check(lv + " impact scatter_add vs scalar (exact)", ctx("len=%ld i=%ld", len, i), got[i], want[i], 0);
    }
  }
  for (uint32_t n : {1u, 4u, 5u, 8u, 9u, 16u, 17u, 70u}) {
    Guarded<float> acc(n);
    for (uint32_t i = 0; i < n; ++i) acc[i] = static_cast<float>(small(g_rng));
    for (float th : {-1.0f, 100.0f, 450.0f, 899.0f, 1e9f})
      for (uint32_t from = 0; from <= n; from += 3)
        check(lv + " impact next_above vs scalar", ctx("n=%ld from=%ld", n, from),
              K.next_above(acc.data(), from, n, th), S.next_above(acc.data(), from, n, th), 0);
  }
}

// The float16 generator must round-trip every non-NaN half, or the f16 cases test nothing.
bool float_to_half_self_test() {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f) && float_to_half(f) != h) {
      std::printf("setup error: float_to_half(%g) != 0x%x\n", f, h);
      return false;
    }
  }
  return float_to_half(65519.0f) == 0x7bffu && float_to_half(65520.0f) == 0x7c00u &&
         float_to_half(1.0f + 0x1p-11f) == 0x3c00u && float_to_half(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01u;
}

}  // namespace

int main() {
  if (!float_to_half_self_test()) return 2;
  const std::vector<SimdLevel> levels = supported_simd_levels();  // scalar first
#if defined(__aarch64__)
  if (!simd_level_supported(SimdLevel::NEON) || best_simd_level() != SimdLevel::NEON) {
    std::printf(
        "setup error: the NEON level is not compiled in or not detected "
        "(build with -DRAGFIND_HAVE_NEON=1)\n");
    return 2;
  }
  if (std::string(similarity_kernels().name) != "neon") {
    std::printf("setup error: similarity_kernels() dispatches to '%s', not 'neon'\n", similarity_kernels().name);
    return 2;
  }
#elif defined(__x86_64__)
  // CMake compiles the AVX2 and AVX-512 files into every x86-64 build; a build without them
  // would pass here on scalar alone.
  if (!simd_level_compiled(SimdLevel::AVX2) || !simd_level_compiled(SimdLevel::AVX512)) {
    std::printf(
        "setup error: the AVX2 / AVX-512 kernels are not compiled in "
        "(RAGFIND_HAVE_AVX2 / RAGFIND_HAVE_AVX512 unset)\n");
    return 2;
  }
#endif
  std::string names;
  for (SimdLevel l : levels) names += std::string(" ") + simd_level_name(l);
  std::printf("SIMD levels this CPU runs:%s\n", names.c_str());
  const SimilarityKernels& S = similarity_kernels_at(SimdLevel::Scalar);
  for (SimdLevel level : levels) {
    const SimilarityKernels& K = similarity_kernels_at(level);
    std::printf("checking level %s against %s...\n", K.name,
                level == SimdLevel::Scalar ? "float64" : "float64 and scalar");
    std::fflush(stdout);
    if (level != SimdLevel::Scalar) check_true(std::string(K.name) + " similarity table registered", "", &K != &S);
    check_f32(K, S);
    check_f16(K, S);
    check_i8(K, S);
    check_tile(K);
    check_nearest(nearest_kernels_at(level), nearest_kernels_at(SimdLevel::Scalar));
    check_pq4(dense::pq4_scan_kernels_at(level));
    check_pq8(dense::pq4_scan_kernels_at(level));
    check_maxsim(level);
    if (level != SimdLevel::Scalar) {  // both against the scalar level
      check_maxsim_batch(level);
      check_impact(level);
    }
  }
  long total = 0;
  std::printf("\n%-52s %9s %6s %11s %9s\n", "kernel", "cases", "fail", "max|err|", "err/tol");
  for (const auto& [name, s] : g_stats) {
    total += s.cases;
    std::printf("%-52s %9ld %6ld %11.3g %9.3g\n", name.c_str(), s.cases, s.failures, s.max_abs, s.max_ratio);
  }
  std::printf("\n%ld cases, %ld mismatches\n", total, g_failures);
  return g_failures == 0 ? 0 : 1;
}
