// Clang thread-safety annotations, and a std::mutex wrapper that carries them.
//
// With clang and -Wthread-safety (the asan and tsan presets) the compiler checks that every member
// marked GUARDED_BY(mu_) is only touched with mu_ held. With gcc the macros expand to nothing.
#pragma once

#include <mutex>

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) KVTIER_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY KVTIER_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) KVTIER_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define REQUIRES(...) KVTIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) KVTIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) KVTIER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) KVTIER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KVTIER_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS KVTIER_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace kvtier {

// A std::mutex the analysis understands.
class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // true: taken (release it with Unlock); false: another thread holds it.
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For std::condition_variable_any and std::scoped_lock.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for the lifetime of the scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace kvtier
