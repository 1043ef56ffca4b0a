"""A shared-memory client that stops half-way, for the crash tests to SIGKILL.

    shm_child.py SOCKET NS FIRST COUNT BLOCK_BYTES reserve|acquire

reserve: KVT.ATTACH, KVT.RESERVE COUNT keys, write the first half of each payload into the arena
and never commit. acquire: KVT.ATTACH, KVT.ACQUIRE COUNT keys and never release. Either way it
prints one line, "READY <ids>", and then waits to be killed.
"""
import mmap
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helpers import RawClient, pack_keys  # noqa: E402


def main():
    path, ns, first, count, block_bytes, mode = sys.argv[1:7]
    first, count, block_bytes = int(first), int(count), int(block_bytes)
    client = RawClient(path)
    info, fd = client.attach()
    arena = mmap.mmap(fd, int(info["arena_bytes"]), mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE)
    keys = pack_keys(range(first, first + count))
    ids = []
    if mode == "reserve":
        grants = client.call("KVT.RESERVE", ns, keys, block_bytes)
        for status, rid, offset in grants:
            assert status == b"OK", grants
            half = block_bytes // 2
            arena[offset:offset + half] = b"\xab" * half
            ids.append(rid)
    elif mode == "acquire":
        grants = client.call("KVT.ACQUIRE", ns, keys)
        for status, lid, offset, length in grants:
            assert status == b"OK", grants
            assert arena[offset:offset + 4] is not None
            ids.append(lid)
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("READY", *ids, flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
