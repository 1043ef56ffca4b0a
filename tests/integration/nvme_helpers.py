"""Helpers for the NVMe tier tests: payloads that are a function of their key, per-key LOOKUP and
GET over a pipelined RawClient, and the tier entries of a stats document.

Every payload is derived from its (salt, number) key, so a checker can tell right bytes from wrong
ones without a record of what was written or acknowledged; blocks of different keys differ
everywhere, so a block served under the wrong key is caught as well as a flipped bit.
"""
import hashlib
import struct

from helpers import RespError, as_dict, encode_command, register_args

MIB = 1 << 20
# LOOKUP's tier codes (docs/protocol.md, common/types.h).
TIER_CODES = {ord("0"): "gpu", ord("1"): "host", ord("2"): "nvme"}
# Commands sent before their replies are read: small enough that the requests never fill the
# socket while the replies are not yet read.
PIPELINE = 64


def key(salt, n):
    return struct.pack(">QQ", salt, n)


def payload(salt, n, size):
    return hashlib.shake_256(b"kvtier-nvme-test" + key(salt, n)).digest(size)


def register_ns(c, model, block_bytes):
    """Registers through a RawClient; the id is a function of the model's description, so the
    same call after a restart names the same namespace."""
    reply = c.call(*register_args(model, block_bytes))
    assert not isinstance(reply, RespError), reply
    return as_dict(reply)["ns"].decode()


def pipelined(c, commands):
    """Sends commands in batches of PIPELINE and returns every reply, in order."""
    replies = []
    for i in range(0, len(commands), PIPELINE):
        batch = commands[i:i + PIPELINE]
        c.send(b"".join(encode_command(*cmd) for cmd in batch))
        replies.extend(c.read_reply() for _ in batch)
    return replies


def put_blocks(c, ns, salt, numbers, size, per_call=8):
    """KVT.PUT of the blocks numbered `numbers`, per_call at a time; every one must be stored."""
    numbers = list(numbers)
    for i in range(0, len(numbers), per_call):
        chunk = numbers[i:i + per_call]
        reply = c.call("KVT.PUT", ns, b"".join(key(salt, n) for n in chunk),
                       *[payload(salt, n, size) for n in chunk])
        assert reply == [b"OK"] * len(chunk), (chunk, reply)


def lookup_each(c, ns, salt, numbers):
    """The tier name of each block (one LOOKUP per key), None where it is not cached."""
    replies = pipelined(c, [("KVT.LOOKUP", ns, key(salt, n)) for n in numbers])
    tiers = []
    for n, reply in zip(numbers, replies):
        assert not isinstance(reply, RespError), (n, reply)
        count, codes = reply
        tiers.append(TIER_CODES[codes[0]] if count else None)
    return tiers


def get_each(c, ns, salt, numbers):
    """Each block's bytes (one GET per key), None for a miss."""
    replies = pipelined(c, [("KVT.GET", ns, key(salt, n)) for n in numbers])
    for n, reply in zip(numbers, replies):
        assert isinstance(reply, list) and len(reply) == 1, (n, reply)
    return [reply[0] for reply in replies]


def tier(stats, name):
    """The stats entry of one tier, or None when the daemon has no such tier."""
    for entry in stats["tiers"]:
        if entry["tier"] == name:
            return entry
    return None


def tier_sum(stats, field):
    return sum(entry.get(field, 0) for entry in stats["tiers"])


def nvme_counters(stats):
    """The NVMe device counters of a stats document (the NVMe tier entry's "device" object)."""
    nvme = tier(stats, "nvme")
    assert nvme is not None and nvme.get("device"), stats["tiers"]
    return nvme["device"]
