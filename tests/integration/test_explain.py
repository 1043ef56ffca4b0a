"""KVT.EXPLAIN and `kvtier explain` against a real daemon: a prompt's blocks evicted by a full host
tier (the last tier here) are reported with the tier, policy, cause and fill they left under; a
namespace that differs only in its layout is named; one that differs only in its salt is not."""
import json
import os
import struct
import subprocess

import pytest

from helpers import RawClient, RespError, as_dict
from kvtierd_process import BIN_DIR, Daemon

MIB = 1 << 20
# 1 MiB blocks in a 32 MiB host tier with no NVMe: 40 blocks of another prompt evict the first.
BLOCK_BYTES = MIB


def fields(layout="nhd", salt=""):
    return ["model", "tiny/model", "dtype", "fp16", "layers", "2", "kv_heads", "1", "head_dim", "4",
            "block_tokens", "2", "layout", layout, "salt", salt]


def cli_flags(layout="nhd"):
    return ["--model", "tiny/model", "--dtype", "fp16", "--layers", "2", "--kv-heads", "1",
            "--head-dim", "4", "--block-tokens", "2", "--layout", layout]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("explain"), host_bytes="32MiB", slab_bytes="4MiB")
    d.start()
    yield d
    rc = d.stop()
    assert rc == 0, d.log()
    assert not os.path.exists(d.unix)


@pytest.fixture
def c(small):
    with RawClient(small.unix) as client:
        yield client


def register(c, f):
    reply = c.call("KVT.REGISTER", *f, "block_bytes", str(BLOCK_BYTES))
    assert not isinstance(reply, RespError), reply
    return as_dict(reply)["ns"].decode()


def explain(c, ns, tokens, f=()):
    packed = b"".join(struct.pack("<I", t) for t in tokens)
    reply = c.call("KVT.EXPLAIN", ns, "TOKENS", packed, *f)
    assert not isinstance(reply, RespError), reply
    top = as_dict(reply)
    return [as_dict(b) for b in top["blocks"]]


def put_prompt(c, ns, tokens, fill):
    """Stores every full block of `tokens` under `ns`, using the keys KVT.EXPLAIN computed."""
    keys = [bytes.fromhex(b["key"].decode()) for b in explain(c, ns, tokens)]
    reply = c.call("KVT.PUT", ns, b"".join(keys), *[bytes([fill]) * BLOCK_BYTES] * len(keys))
    assert reply == [b"OK"] * len(keys), reply


def run_cli(small, *args):
    return subprocess.run([str(BIN_DIR / "kvtier"), "explain", "--url", f"unix://{small.unix}",
                           *args], capture_output=True, text=True, timeout=30)


def test_evicted_blocks_and_a_namespace_with_another_layout(small, c):
    ns = register(c, fields())
    hnd = register(c, fields(layout="hnd"))
    salted = register(c, fields(salt="tenant-b"))
    other = register(c, fields() + ["revision", "filler"])
    prompt = list(range(100, 108))  # 4 blocks of 2 tokens
    put_prompt(c, ns, prompt, 1)
    put_prompt(c, other, list(range(5000, 5080)), 2)  # 40 blocks: the first prompt is evicted
    put_prompt(c, hnd, prompt[:2], 3)
    put_prompt(c, salted, prompt[2:4], 4)  # not the same chain: never matches, never named anyway

    blocks = explain(c, ns, prompt)
    assert [b["state"] for b in blocks] == [b"missing"] * 4
    for b in blocks:
        assert b["reason"] == b"evicted", b
        assert b["tier"] == b"host" and b["policy"] == b"sticky" and b["cause"] == b"last_tier", b
        assert 0 < b["tier_used_bytes"] <= b["tier_capacity_bytes"] == 32 * MIB, b

    out = run_cli(small, *cli_flags(), *map(str, prompt), "--json")
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert [b["reason"] for b in j["blocks"]] == ["evicted"] * 4
    elsewhere = j["blocks"][0]["elsewhere"]
    assert [(e["field"], e["value"], e["ns"]) for e in elsewhere] == [("layout", "hnd", hnd)]
    assert all("elsewhere" not in b for b in j["blocks"][1:])

    table = run_cli(small, *cli_flags(), *map(str, prompt))
    assert table.returncode == 0, table.stderr
    assert "evicted" in table.stdout and "by sticky, last tier" in table.stdout, table.stdout
    assert "held where layout=hnd" in table.stdout, table.stdout
    assert "tenant-b" not in table.stdout


def test_the_cli_names_a_bad_namespace_flag(small):
    out = run_cli(small, "--model", "m", "--dtype", "fp17", "--layers", "1", "--kv-heads", "1",
                  "--head-dim", "1", "--block-tokens", "2", "--layout", "x", "1", "2")
    assert out.returncode == 1
    assert "kv_dtype" in out.stderr or "dtype" in out.stderr, out.stderr
