#!/usr/bin/env python3
"""LRU in plain Python, for docs/simulate.md's speed comparison with `kvtier simulate`.

    bench/simulate_python_lru.py TRACE CAPACITY_BLOCKS

Prints the block hits of `kvtier simulate TRACE --capacity-blocks CAPACITY_BLOCKS --policy lru`
with the same semantics (leading present blocks hit; a request's blocks touched last block first;
eviction after the whole request), one json.loads per line and an OrderedDict as the cache.
"""
import collections
import json
import sys

path, capacity = sys.argv[1], int(sys.argv[2])
cache = collections.OrderedDict()  # least recently used first
hits = 0
with open(path) as trace:
    for line in trace:
        if not line.strip():
            continue
        ids = json.loads(line)["hash_ids"]
        n = 0
        while n < len(ids) and ids[n] in cache:
            n += 1
        hits += n
        for block in reversed(ids):  # the head of the prompt ends up the most recent
            cache[block] = None
            cache.move_to_end(block)
        while len(cache) > capacity:
            cache.popitem(last=False)
print(hits)
