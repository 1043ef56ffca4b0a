"""Tenant quotas against a real daemon: the config file's quotas are in force from the start, a
noisy tenant streaming through a full host tier leaves a quiet tenant's blocks within its quota
alone, KVT.QUOTA is an admin's (the Unix socket, as the daemon's user) and never a TCP client's,
and a quota in a tier the daemon does not have stops it at start with the key named."""
import pathlib
import struct

import pytest

from helpers import RawClient, RespError, as_dict
from kvtierd_process import Daemon

MIB = 1 << 20
BLOCK_BYTES = MIB  # 32 blocks fill the 32 MiB host tier (no NVMe: evicted blocks are gone)

QUOTAS = """\
quotas:
  tenants:
    quiet: {host: 10MiB}
"""


def fields(salt):
    return ["model", "tiny/model", "dtype", "fp16", "layers", "2", "kv_heads", "1", "head_dim", "4",
            "block_tokens", "2", "layout", "nhd", "salt", salt, "block_bytes", str(BLOCK_BYTES)]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("quotas"), host_bytes="32MiB", slab_bytes="4MiB",
               extra_config=QUOTAS)
    d.start()
    yield d
    assert d.stop() == 0, d.log()


def register(c, salt):
    reply = c.call("KVT.REGISTER", *fields(salt))
    assert not isinstance(reply, RespError), reply
    return as_dict(reply)["ns"].decode()


def chain(c, ns, first_token, blocks):
    packed = b"".join(struct.pack("<I", t) for t in range(first_token, first_token + 2 * blocks))
    reply = as_dict(c.call("KVT.EXPLAIN", ns, "TOKENS", packed))
    return b"".join(bytes.fromhex(as_dict(b)["key"].decode()) for b in reply["blocks"])


def put(c, ns, packed_keys, fill):
    n = len(packed_keys) // 16
    reply = c.call("KVT.PUT", ns, packed_keys, *[bytes([fill]) * BLOCK_BYTES] * n)
    assert reply == [b"OK"] * n, reply


def test_the_configs_quota_keeps_a_quiet_tenant_whole_beside_a_noisy_one(daemon):
    with RawClient(daemon.unix) as c:
        rules = c.call("KVT.QUOTA", "GET")
        assert [as_dict(r) for r in rules] == [
            {"subject": b"tenant quiet", "tier": b"host", "quota_bytes": 10 * MIB,
             "used_bytes": 0}], rules
        quiet = register(c, "quiet")
        noisy = register(c, "noisy")
        working_set = chain(c, quiet, 100, 8)
        put(c, quiet, working_set, 1)
        # 96 unique blocks, three times the tier: without the quota the quiet tenant's 8 blocks,
        # the oldest, would be the first to go.
        for start in range(0, 96 * 2, 16):
            put(c, noisy, chain(c, noisy, 10_000 + start, 8), 2)
        assert c.call("KVT.LOOKUP", quiet, working_set)[0] == 8
        got = c.call("KVT.GET", quiet, working_set[:16])
        assert got == [bytes([1]) * BLOCK_BYTES], "the quiet tenant's bytes came back changed"
        used = as_dict(c.call("KVT.QUOTA", "GET")[0])["used_bytes"]
        assert used == 8 * MIB
        # The same prompt, 6 blocks longer, into the full tier: up to its quota (10 blocks, and
        # the one put that finds it exactly there) the room comes from the noisy tenant; past it,
        # each put evicts one of the quiet tenant's own blocks. It ends one block over, not 14.
        more = chain(c, quiet, 100, 14)[len(working_set):]
        put(c, quiet, more, 3)
        assert as_dict(c.call("KVT.QUOTA", "GET")[0])["used_bytes"] == 11 * MIB


def test_a_tcp_client_is_not_an_admin(daemon):
    with RawClient((daemon.host, daemon.port)) as c:
        reply = c.call("KVT.QUOTA", "SET", "TENANT", "noisy", "host", "30MiB")
        assert isinstance(reply, RespError) and str(reply).startswith("NOPERM"), reply
    with RawClient(daemon.unix) as c:
        assert len(c.call("KVT.QUOTA", "GET")) == 1  # unchanged


def test_an_admin_sets_a_quota_at_run_time(daemon):
    with RawClient(daemon.unix) as c:
        assert c.call("KVT.QUOTA", "SET", "TENANT", "noisy", "host", "4MiB") == b"OK"
        rules = {as_dict(r)["subject"]: as_dict(r) for r in c.call("KVT.QUOTA", "GET")}
        assert rules[b"tenant noisy"]["quota_bytes"] == 4 * MIB
        # The noisy tenant's blocks already stored count at once.
        assert rules[b"tenant noisy"]["used_bytes"] > 0
        assert c.call("KVT.QUOTA", "SET", "TENANT", "noisy", "host", "0") == b"OK"


def test_a_quota_in_a_tier_the_daemon_lacks_stops_it_at_start(tmp_path):
    d = Daemon(tmp_path, host_bytes="32MiB", slab_bytes="4MiB",
               extra_config="quotas:\n  tenants:\n    quiet: {nvme: 1GiB}\n")
    with pytest.raises(RuntimeError):
        d.start()
    assert "quotas.tenants.quiet.nvme: no nvme tier to set a quota in" in d.log(), d.log()
    assert d.proc.returncode == 2, d.log()


def test_a_gpu_quota_without_a_gpu_tier_is_a_config_error_that_writes_nothing(tmp_path):
    """Regression: the quota was checked after the tiers had opened, so the start failed with 1
    (not the config error's 2) and left the NVMe tier's preallocated file behind."""
    d = Daemon(tmp_path, host_bytes="32MiB", slab_bytes="4MiB", nvme_bytes="64MiB",
               extra_config="quotas:\n  tenants:\n    acme: {gpu: 1GiB}\n")
    with pytest.raises(RuntimeError):
        d.start()
    assert "quotas.tenants.acme.gpu: no gpu tier to set a quota in" in d.log(), d.log()
    assert d.proc.returncode == 2, d.log()
    assert not pathlib.Path(d.data_dir).exists(), list(pathlib.Path(d.data_dir).rglob("*"))
