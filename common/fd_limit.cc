#include "common/fd_limit.h"

#include <sys/resource.h>

#include <cerrno>

namespace kvtier {

Result<uint64_t> RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoStatus(errno, "getrlimit(RLIMIT_NOFILE)");
  if (limit.rlim_cur == limit.rlim_max) return static_cast<uint64_t>(limit.rlim_cur);
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return ErrnoStatus(errno, "setrlimit(RLIMIT_NOFILE) from " + std::to_string(soft) + " to " +
                                  std::to_string(limit.rlim_max));
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace kvtier
