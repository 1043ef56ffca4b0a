#!/usr/bin/env python3
"""What an online cache policy can know about a conversation trace's next turns.

Reads a Mooncake-format trace (one JSON request per line, with "timestamp" in ms and
"hash_ids") and links each request to the conversation turn it continues: the latest earlier
request that holds the deepest block of its cached prefix (at least two blocks, so that a shared
system prompt alone does not link two conversations). Prints, for docs/simulate.md:

  - how many requests are continued later, by turn index (the chance that a conversation goes on);
  - the time and the number of new blocks between a turn and the next (what a cache must hold
    across to serve it);
  - the correlation of the log gaps of consecutive turns of one conversation (how well a
    conversation's last gap predicts its next).

Usage: python3 bench/conversation_turns.py [TRACE] (default: ../shared/traces/
mooncake_conversation_trace.jsonl).
"""
import itertools
import json
import math
import sys


def quantiles(values, qs=(0.1, 0.25, 0.5, 0.75, 0.9)):
    s = sorted(values)
    return [s[min(int(q * len(s)), len(s) - 1)] for q in qs]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/mooncake_conversation_trace.jsonl"
    requests = [json.loads(line) for line in open(path) if line.strip()]
    latest = {}  # block id -> index of the latest request that held it
    parent = [None] * len(requests)
    turn = [0] * len(requests)
    new_blocks = [0] * len(requests)
    for j, r in enumerate(requests):
        ids = r["hash_ids"]
        k = 0
        while k < len(ids) and ids[k] in latest:
            k += 1
        if k >= 2:
            parent[j] = latest[ids[k - 1]]
            turn[j] = turn[parent[j]] + 1
        new_blocks[j] = sum(1 for b in ids if b not in latest)
        for b in ids:
            latest[b] = j
    following = [None] * len(requests)
    for j, p in enumerate(parent):
        if p is not None and following[p] is None:
            following[p] = j

    print(f"requests {len(requests)}, continued later {sum(f is not None for f in following)}")
    buckets = [("0", lambda t: t == 0), ("1", lambda t: t == 1), ("2", lambda t: t == 2),
               ("3-5", lambda t: 3 <= t <= 5), ("6+", lambda t: t >= 6)]
    for name, member in buckets:
        idx = [i for i in range(len(requests)) if member(turn[i])]
        if idx:
            went_on = sum(following[i] is not None for i in idx)
            print(f"turn {name:>3}: {len(idx):6d} requests, {went_on / len(idx):.2f} continued")

    continued = [i for i in range(len(requests)) if following[i] is not None]
    gaps_s = [(requests[following[i]]["timestamp"] - requests[i]["timestamp"]) / 1000
              for i in continued]
    cumulative = list(itertools.accumulate(new_blocks))
    between = [cumulative[following[i] - 1] - cumulative[i] for i in continued]
    print("gap to the next turn, s (10/25/50/75/90%):",
          " / ".join(f"{g:.0f}" for g in quantiles(gaps_s)))
    print("new blocks before the next turn (10/25/50/75/90%):",
          " / ".join(str(b) for b in quantiles(between)))

    pairs = []
    for j, p in enumerate(parent):
        if p is None or following[j] is None:
            continue
        before = requests[j]["timestamp"] - requests[p]["timestamp"]
        after = requests[following[j]]["timestamp"] - requests[j]["timestamp"]
        if before > 0 and after > 0:
            pairs.append((math.log(before), math.log(after)))
    if len(pairs) > 1:
        n = len(pairs)
        mx = sum(a for a, _ in pairs) / n
        my = sum(b for _, b in pairs) / n
        cov = sum((a - mx) * (b - my) for a, b in pairs) / n
        vx = sum((a - mx) ** 2 for a, _ in pairs) / n
        vy = sum((b - my) ** 2 for _, b in pairs) / n
        print(f"log gaps of consecutive turns: correlation {cov / math.sqrt(vx * vy):.2f} "
              f"over {n} pairs")


if __name__ == "__main__":
    main()
