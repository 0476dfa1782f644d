// A dependency-free test harness for the C++ tests: TEST(name) { ... } registers a case,
// CHECK / CHECK_EQ / CHECK_THROWS record failures (with file:line and the values) and go on,
// and RAGFIND_TEST_MAIN runs every case and exits 1 if any check failed.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ragfind_test {

struct Case {
  const char* name;
  std::function<void()> fn;
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

struct Registrar {
  Registrar(const char* name, std::function<void()> fn) { cases().push_back({name, std::move(fn)}); }
};

inline long& failures() {
  static long n = 0;
  return n;
}

inline void fail(const char* file, int line, const std::string& what) {
  if (++failures() <= 50) std::printf("  FAIL %s:%d: %s\n", file, line, what.c_str());
}

template <class A, class B>
void check_eq(const A& a, const B& b, const char* ea, const char* eb, const char* file, int line) {
  if (a == b) return;
  std::ostringstream os;
  os << ea << " == " << eb << " (got " << a << " vs " << b << ")";
  fail(file, line, os.str());
}

inline int run_all() {
  long failed_cases = 0;
  for (const Case& c : cases()) {
    const long before = failures();
    std::printf("[ RUN  ] %s\n", c.name);
    try {
      c.fn();
    } catch (const std::exception& e) {
      fail(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
    } catch (...) { fail(__FILE__, __LINE__, "uncaught non-standard exception"); }
    const bool ok = failures() == before;
    failed_cases += !ok;
    std::printf("[ %s ] %s\n", ok ? " OK " : "FAIL", c.name);
  }
  std::printf("%ld passed, %ld failed\n", static_cast<long>(cases().size()) - failed_cases, failed_cases);
  return failed_cases == 0 ? 0 : 1;
}

}  // namespace ragfind_test

#define RAGFIND_TEST_CAT2(a, b) a##b
#define RAGFIND_TEST_CAT(a, b) RAGFIND_TEST_CAT2(a, b)
#define TEST(name)                                                                       \
  static void name();                                                                    \
  static const ragfind_test::Registrar RAGFIND_TEST_CAT(registrar_, name)(#name, &name); \
  static void name()

#define CHECK(cond) ((cond) ? void(0) : ragfind_test::fail(__FILE__, __LINE__, "CHECK(" #cond ") failed"))
#define CHECK_MSG(cond, msg) \
  ((cond) ? void(0) : ragfind_test::fail(__FILE__, __LINE__, std::string(#cond " failed: ") + (msg)))
#define CHECK_EQ(a, b) ragfind_test::check_eq((a), (b), #a, #b, __FILE__, __LINE__)
// Passes when `expr` throws an exception of type `type` (or derived).
#define CHECK_THROWS(type, expr)                                                         \
  do {                                                                                   \
    bool thrown_ = false;                                                                \
    try {                                                                                \
      expr;                                                                              \
    } catch (const type&) { thrown_ = true; } catch (...) {                              \
    }                                                                                    \
    if (!thrown_) ragfind_test::fail(__FILE__, __LINE__, #expr " did not throw " #type); \
  } while (0)

#define RAGFIND_TEST_MAIN \
  int main() { return ragfind_test::run_all(); }
