// Belady: the offline optimum for `kvtier simulate`, the bound every online policy is compared
// against. It reads the whole trace first and knows, for every block, the next request that uses
// it.
//
// Same semantics as the online policies (simulator.h): a request hits its longest present prefix;
// then all its blocks are present; then blocks are evicted down to the capacity. The eviction
// rule: evict the block whose next use is farthest in the future (blocks never used again first),
// ties broken deepest-first (larger position in the prompt), then in a fixed order.
//
// Why this is the optimum, and when:
// - Counting every block reference found present on arrival, whether or not its prefix is (the
//   "block-present" count), keeping the nearest-next-use blocks after each request is optimal:
//   the exchange argument of Belady's MIN, which holds with bypass (a block just used may be
//   dropped at once) and with a request's blocks arriving together, as long as each block counts
//   once per request. No policy's prefix hits exceed its own block-present count, so belady's
//   block-present count bounds every policy's block hits: upper_bound_hit_blocks.
// - In a trace whose ids name prefixes (an id is always preceded by the same ids, as the Mooncake
//   format promises), a parent is used whenever its child is, so it is never next used later than
//   the child, and the deepest-first tie-break evicts the child first. The cache then never holds a
//   block without its parent, every present block of a request lies in its leading prefix, and
//   belady's prefix hits equal its block-present count: the schedule is the exact optimum for block
//   hits (hit_blocks == upper_bound_hit_blocks). The run checks this rather than assuming it;
//   when they differ the trace broke the promise and hit_blocks is what this schedule achieves
//   (a lower bound on the optimum), upper_bound_hit_blocks an upper one.
// - A request that repeats an id breaks "once per request"; upper_bound_hit_blocks is then unset.
// - Token hits and saved prefill cost are those of the same schedule: a feasible schedule, so a
//   lower bound on what the best schedule for those metrics achieves. For tokens it is exact up to
//   partial last blocks; for prefill cost, keeping cheap shallow blocks in place of a deep one may
//   save more, and the exact optimum (weighted caching, a min-cost flow over reuse intervals) is
//   not computed. upper_bound_hit_blocks x block_tokens bounds token hits.
//
// Cost: O(R log R) time for R block references; memory about 32 bytes per reference.
// Pure function; any thread.
#pragma once

#include <vector>

#include "common/status.h"
#include "daemon/cli/simulator.h"
#include "daemon/cli/trace_reader.h"

namespace kvtier::cli {

// Errors: those of ValidateSimulationOptions; kInvalidArgument when the trace has 2^32 or more
// requests or distinct blocks (the run keeps 32-bit indices to halve its memory).
Result<SimulationResult> SimulateBelady(const std::vector<TraceRequest>& requests,
                                        const SimulationOptions& options);

}  // namespace kvtier::cli
