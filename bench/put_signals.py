#!/usr/bin/env python3
"""How much the signals a put carries say about which blocks come back.

When an engine stores a request's blocks, kvtierd could know, per block: whether the request's
lookup found at least two blocks of its prefix (a conversation going on; one block is often a
system prompt that every request shares), how many new blocks the request adds, and whether the
block is the request's last (a partial block that the next turn extends into a different one).
Found is counted as a cache that never evicts would answer. This script sorts a Mooncake-format trace's new blocks into classes by those
signals and prints, per class, its share of new blocks and the share of them that any later
request reads again.

Then it replays the trace with the semantics of `kvtier simulate` (docs/simulate.md: a request
hits its longest present prefix; its blocks are inserted or touched last block first; eviction
after the whole request) through two caches of CAPACITY blocks:

  - lru:   the least recently used block goes (the same counts as `kvtier simulate --policy lru`,
           a check on this script);
  - class: one LRU list per class (and one for blocks read again); the victim is the oldest block
           of the list whose reuse rate over that block's age is lowest. The rates are each class's
           true share from the whole trace (an oracle of the rates, not of the blocks): an upper
           bound on what these classes can tell an online policy.

Usage: python3 bench/put_signals.py TRACE CAPACITY
"""
import collections
import json
import sys
from collections import OrderedDict

READ_AGAIN = ("read again",)


def read_requests(path):
    with open(path) as f:
        return [json.loads(line)["hash_ids"] for line in f if line.strip()]


def new_blocks_bucket(n):
    return "1-2" if n <= 2 else "3-8" if n <= 8 else "9-32" if n <= 32 else "33+"


def block_class(prefix_found, new_blocks, is_last):
    return ("found 2+" if prefix_found else "found 0-1", new_blocks_bucket(new_blocks) + " new",
            "last" if is_last else "")


def class_table(requests):
    """Per class: new blocks, and how many of them a later request reads."""
    uses = collections.Counter(b for ids in requests for b in ids)
    seen, table = set(), collections.defaultdict(lambda: [0, 0])
    for ids in requests:
        found = 0
        while found < len(ids) and ids[found] in seen:
            found += 1
        new = [b for b in ids if b not in seen]
        for j, b in enumerate(ids):
            if b not in seen:
                row = table[block_class(found >= 2, len(new), j == len(ids) - 1)]
                row[0] += 1
                row[1] += uses[b] > 1
        seen.update(ids)
    return table


def replay(requests, capacity, rates):
    """Block hit ratio; `rates` None: plain LRU."""
    lists = collections.defaultdict(OrderedDict)
    where, last_use = {}, {}
    hits = total = held = 0
    for now, ids in enumerate(requests):
        total += len(ids)
        found = 0
        while found < len(ids) and ids[found] in where:
            found += 1
        hits += found
        new = sum(1 for b in ids if b not in where)
        for j in range(len(ids) - 1, -1, -1):
            b = ids[j]
            if b in where:
                del lists[where[b]][b]
                c = READ_AGAIN
            else:
                held += 1
                c = block_class(found >= 2, new, j == len(ids) - 1)
            if rates is None:
                c = READ_AGAIN
            where[b], last_use[b] = c, now
            lists[c][b] = True
        while held > capacity:
            def density(c):
                oldest = next(iter(lists[c]))
                return rates.get(c, 0.5) / (now - last_use[oldest] + 1) if rates else 0
            victim_list = min((c for c in lists if lists[c]), key=density)
            b, _ = lists[victim_list].popitem(last=False)
            del where[b], last_use[b]
            held -= 1
    return hits / total


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    requests, capacity = read_requests(sys.argv[1]), int(sys.argv[2])
    table = class_table(requests)
    blocks = sum(n for n, _ in table.values())
    print(f"{'class':<36} {'share of new blocks':>20} {'read again':>11}")
    for c in sorted(table):
        n, reused = table[c]
        print(f"{' / '.join(x for x in c if x):<36} {n / blocks:>20.3f} {reused / n:>11.3f}")
    rates = {c: reused / n for c, (n, reused) in table.items()}
    rates[READ_AGAIN] = 0.5
    print(f"lru {replay(requests, capacity, None):.4f}")
    print(f"class {replay(requests, capacity, rates):.4f}")


if __name__ == "__main__":
    main()
