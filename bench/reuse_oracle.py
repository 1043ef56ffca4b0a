#!/usr/bin/env python3
"""How far knowing *which* blocks come back gets a cache, without knowing *when*.

Replays a Mooncake-format trace (one JSON request per line with "hash_ids") with the semantics of
`kvtier simulate` (docs/simulate.md: a request hits its longest present prefix; its blocks are
inserted or touched last block first; eviction after the whole request) through two caches of
CAPACITY blocks:

  - lru:    evicts the least recently used block (the same counts as `kvtier simulate --policy
            lru`, a check on this script);
  - oracle: knows of every block whether any later request will read it again, and evicts the
            least recently used of the blocks that never come back first, then in LRU order.

Belady (`kvtier simulate --policy belady`) knows when each block comes back too. The oracle's
share of Belady says how much of the optimum an online policy could reach by predicting reuse
alone; the rest needs the timing of the reuse.

Usage: python3 bench/reuse_oracle.py TRACE CAPACITY
Prints "lru RATIO" and "oracle RATIO" (block hit ratios).
"""
import json
import sys
from collections import OrderedDict

NEVER = float("inf")


def read_requests(path):
    with open(path) as f:
        return [json.loads(line)["hash_ids"] for line in f if line.strip()]


def next_uses(requests):
    """For each request, the index of the next request that reads each of its blocks."""
    after, later = [None] * len(requests), {}
    for r in range(len(requests) - 1, -1, -1):
        after[r] = [later.get(b, NEVER) for b in requests[r]]
        for b in requests[r]:
            later[b] = r
    return after


def replay(requests, after, capacity, oracle):
    coming_back, not_coming_back = OrderedDict(), OrderedDict()  # LRU order, oldest first
    hits = total = 0
    for r, ids in enumerate(requests):
        total += len(ids)
        for b in ids:
            if b not in coming_back and b not in not_coming_back:
                break
            hits += 1
        for b, next_use in reversed(list(zip(ids, after[r]))):
            coming_back.pop(b, None)
            not_coming_back.pop(b, None)
            (not_coming_back if oracle and next_use == NEVER else coming_back)[b] = True
        while len(coming_back) + len(not_coming_back) > capacity:
            (not_coming_back if not_coming_back else coming_back).popitem(last=False)
    return hits / total


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    requests = read_requests(sys.argv[1])
    capacity = int(sys.argv[2])
    after = next_uses(requests)
    print(f"lru {replay(requests, after, capacity, oracle=False):.4f}")
    print(f"oracle {replay(requests, after, capacity, oracle=True):.4f}")


if __name__ == "__main__":
    main()
