// Crash-safety helpers shared by the index writers (tests/reliability/test_crash_safety.py).
//
// fault_point(name): when the environment variable RAGFIND_FAULT_INJECT equals `name`, the
// process kills itself with SIGKILL right there (no unwinding, no atexit, exactly like a power
// cut or an OOM kill), so tests can stop a save at named points. Costs one getenv per call.
//
// remove_stale_temp_files(path): a writer killed mid-save leaves its temporary file
// "<path>.tmp-<pid>-<random>" behind; the next save of the same path deletes those whose
// writer process no longer exists (kill(pid, 0) == ESRCH), so orphans never pile up.
#pragma once
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ragfind::common {

/// Kills the process with SIGKILL if RAGFIND_FAULT_INJECT names this point (testing only).
inline void fault_point(const char* name) {
  const char* want = std::getenv("RAGFIND_FAULT_INJECT");
  if (want != nullptr && std::strcmp(want, name) == 0) ::kill(::getpid(), SIGKILL);
}

/// Deletes "<path>.tmp-<pid>-*" files left by writers that died (best effort, never throws).
inline void remove_stale_temp_files(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const char* name = e->d_name;
    if (std::strncmp(name, prefix.c_str(), prefix.size()) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name + prefix.size(), &end, 10);
    if (end == name + prefix.size() || *end != '-' || pid <= 0) continue;
    if (pid == static_cast<long>(::getpid())) continue;                       // another save of ours may be running
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // writer alive
    ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

}  // namespace ragfind::common
