// The generic key space's names and expiry times kept across a clean restart.
//
// The values of the generic key space survive a clean stop on NVMe (the shutdown flush), but
// their names and expiry times live in memory (generic_keys.h). kvtierd writes them to one file
// in its data directory just before the flush (which a SIGKILL past a service's grace period may
// cut short; a name whose value did not reach NVMe is dropped at the next start) and reads it
// back at the next start, so that SCAN and
// KEYS list the keys again and an expiry outlives the restart. A crash leaves no file: then, as
// before, a value comes back without its name until a command names it, and without an expiry.
//
// Format (little-endian): the 8 bytes "KVTKEYS" 0x01, the entry count (u64), per entry the block
// key (u64 high, u64 low), the expiry (u64 Unix milliseconds, 0 for none), the name's length
// (u32) and bytes; then XXH3-64 (seed 0) of everything before it (u64). Written to a temporary
// file, synced and renamed into place: a file is whole or absent.
//
// Call these while no command runs (before the server starts, after it stops).
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"
#include "daemon/server/generic_keys.h"

namespace kvtier::server {

// Writes every entry of `keys` to `path`. Returns the entries written; kDeviceError naming the
// path when a write, sync or rename fails (the old file, if any, is left as it was).
Result<size_t> SaveGenericKeys(GenericKeys& keys, const std::string& path);

// Enters every entry of the file at `path` into `keys` and removes the file, so that a later
// crash cannot bring back names and expiry times older than the run that follows. Returns the
// entries read: 0 when there is no file. kCorruption (nothing entered, the file removed) for a
// file that is not whole or not of this format; kDeviceError when it cannot be read.
Result<size_t> LoadGenericKeys(GenericKeys& keys, const std::string& path);

}  // namespace kvtier::server
