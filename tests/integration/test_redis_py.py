"""Generic and connection commands through redis-py, in RESP2 and RESP3, on TCP and the Unix
socket, against a running kvtierd."""
import os

import pytest
import redis

from helpers import PASSWORD, RawClient, RespError

PROTOCOLS = [2, 3]


def connect(daemon, protocol=2, unix=False, **kwargs):
    if "password" not in kwargs:
        # Without credentials redis-py's CLIENT SETINFO on connect would meet NOAUTH (as on Redis
        # with requirepass) and fail the connect itself.
        kwargs.update(lib_name=None, lib_version=None)
    if unix:
        return redis.Redis(unix_socket_path=daemon.unix, protocol=protocol, socket_timeout=10,
                           **kwargs)
    return redis.Redis(host=daemon.host, port=daemon.port, protocol=protocol, socket_timeout=10,
                       **kwargs)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_ping_set_get(kvtierd, protocol, unix):
    r = connect(kvtierd, protocol, unix)
    assert r.ping() is True
    key = f"greeting:{protocol}:{unix}"
    assert r.set(key, "hello") is True
    assert r.get(key) == b"hello"
    assert r.get(key + ":missing") is None
    r.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exists_del_mget_mset_dbsize(kvtierd, protocol):
    r = connect(kvtierd, protocol)
    p = f"kv{protocol}:"
    before = r.dbsize()
    assert r.mset({p + "a": "1", p + "b": "2", p + "c": "3"}) is True
    assert r.dbsize() == before + 3
    assert r.mget([p + "a", p + "nope", p + "c"]) == [b"1", None, b"3"]
    assert r.exists(p + "a", p + "b", p + "nope") == 2
    assert r.exists(p + "a", p + "a") == 2
    assert r.set(p + "a", "replaced") is True
    assert r.get(p + "a") == b"replaced"
    assert r.dbsize() == before + 3
    assert r.delete(p + "a", p + "b", p + "nope") == 2
    assert r.exists(p + "a", p + "b") == 0
    assert r.dbsize() == before + 1
    assert r.delete(p + "c") == 1
    assert r.dbsize() == before
    r.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_info_sections(kvtierd, protocol):
    r = connect(kvtierd, protocol)
    r.set("info:key", "v")
    info = r.info()
    assert info["redis_mode"] == "standalone"
    assert info["connected_clients"] >= 1
    assert info["db0"]["keys"] == r.dbsize()
    kvt = r.info("kvtier")
    assert set(kvt) >= {"blocks_present", "leases_active", "committed_puts",
                        "tier_host_capacity_bytes", "tier_host_used_bytes", "tier_host_blocks"}
    assert kvt["blocks_present"] == r.dbsize()
    assert kvt["tier_host_capacity_bytes"] == 256 << 20
    assert kvt["tier_host_blocks"] == kvt["blocks_present"]
    assert "redis_mode" not in kvt, "INFO kvtier returned other sections"
    r.close()


def test_hello_3(kvtierd):
    r = connect(kvtierd, protocol=3)
    hello = r.execute_command("HELLO", "3")
    assert isinstance(hello, dict), hello
    hello = {k.decode(): v for k, v in hello.items()}
    assert hello["server"] == b"kvtier"
    assert hello["proto"] == 3
    assert hello["mode"] == b"standalone"
    assert hello["role"] == b"master"
    assert list(hello)[:4] == ["server", "version", "proto", "id"]
    # Back to RESP2: a flat array on the same connection.
    r2 = connect(kvtierd, protocol=2)
    flat = r2.execute_command("HELLO", "2")
    assert isinstance(flat, list) and flat[0:2] == [b"server", b"kvtier"]
    with pytest.raises(redis.ResponseError, match="NOPROTO"):
        r2.execute_command("HELLO", "4")
    r.close()
    r2.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_setname(kvtierd, protocol):
    r = connect(kvtierd, protocol, single_connection_client=True)
    assert r.client_getname() is None
    assert r.client_setname("engine-7") is True
    assert r.client_getname() in ("engine-7", b"engine-7")
    assert isinstance(r.client_id(), int)
    with pytest.raises(redis.ResponseError, match="cannot contain spaces"):
        r.client_setname("has space")
    r.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_binary_safe_values(kvtierd, protocol):
    r = connect(kvtierd, protocol)
    every_byte = bytes(range(256)) * 4
    tricky = b"\r\n$-1\r\n*2\r\n\x00\xff" + every_byte
    key = b"bin\x00\r\nkey\xff" + bytes([protocol])
    assert r.set(key, tricky)
    assert r.get(key) == tricky
    assert r.set(key + b":empty", b"")
    assert r.get(key + b":empty") == b""
    big = os.urandom(2 << 20)
    assert r.set(key + b":big", big)
    assert r.get(key + b":big") == big
    r.mset({key + b":big2": big[::-1], key + b":small": b"s"})
    assert r.mget([key + b":big", key + b":big2", key + b":small"]) == [big, big[::-1], b"s"]
    assert r.delete(key, key + b":empty", key + b":big", key + b":big2", key + b":small") == 5
    r.close()


def test_pipeline(kvtierd):
    r = connect(kvtierd)
    with r.pipeline(transaction=False) as pipe:
        for i in range(200):
            pipe.set(f"pipe:{i}", i)
        for i in range(200):
            pipe.get(f"pipe:{i}")
        replies = pipe.execute()
    assert replies[:200] == [True] * 200
    assert replies[200:] == [str(i).encode() for i in range(200)]
    assert r.delete(*[f"pipe:{i}" for i in range(200)]) == 200
    r.close()


def test_errors_in_redis_wording(kvtierd):
    r = connect(kvtierd)
    with pytest.raises(redis.ResponseError,
                       match="unknown command 'NOSUCH', with args beginning with: 'a'"):
        r.execute_command("NOSUCH", "a")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'get'"):
        r.execute_command("GET")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", "k", "v", "NX", "XX")
    with pytest.raises(redis.AuthenticationError, match="without any password configured"):
        r.execute_command("AUTH", "x")
    assert {k.decode() if isinstance(k, bytes) else k: v
            for k, v in r.config_get("save").items()} in ({"save": b""}, {"save": ""})
    assert r.execute_command("SELECT", "0") is True
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        r.execute_command("SELECT", "1")
    assert r.ping()
    r.close()


# --- AUTH, against a daemon given a password in KVTIER_PASSWORD ----------------------------------

def test_the_password_comes_from_the_environment_not_the_command_line(kvtierd_auth):
    """Regression: the deploy files passed --password "$KVTIER_PASSWORD", which every user of the
    node reads in /proc/PID/cmdline. kvtierd reads the variable itself (the fixture sets only
    it), and AUTH is required with it."""
    with open(f"/proc/{kvtierd_auth.proc.pid}/cmdline", "rb") as f:
        cmdline = f.read()
    assert PASSWORD.encode() not in cmdline and b"--password" not in cmdline
    with RawClient((kvtierd_auth.host, kvtierd_auth.port)) as c:
        assert str(c.call("GET", "k")) == "NOAUTH Authentication required."
        assert c.call("AUTH", PASSWORD) == b"OK"


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_auth_required(kvtierd_auth, unix):
    # One connection throughout (redis-py drops a connection after an authentication error).
    address = kvtierd_auth.unix if unix else (kvtierd_auth.host, kvtierd_auth.port)
    with RawClient(address) as c:
        assert c.call("PING") == b"PONG"
        for command in (["GET", "k"], ["SET", "k", "v"], ["KVT.STATS"], ["NOSUCH"]):
            reply = c.call(*command)
            assert isinstance(reply, RespError), (command, reply)
            assert str(reply) == "NOAUTH Authentication required.", command
        reply = c.call("AUTH", "wrong")
        assert str(reply) == "WRONGPASS invalid username-password pair"
        assert isinstance(c.call("GET", "k"), RespError)
        assert c.call("AUTH", PASSWORD) == b"OK"
        assert c.call("SET", "k", "v") == b"OK"
        assert c.call("GET", "k") == b"v"
        assert c.call("DEL", "k") == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auth_errors_through_redis_py(kvtierd_auth, protocol):
    r = connect(kvtierd_auth, protocol=2)
    assert r.ping() is True
    with pytest.raises(redis.AuthenticationError, match="Authentication required"):
        r.get("k")
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        r.execute_command("AUTH", "wrong")
    r.close()
    ok = connect(kvtierd_auth, protocol=protocol, password=PASSWORD)
    assert ok.set("k2", "v") is True and ok.get("k2") == b"v"
    ok.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_auth_by_client_library(kvtierd_auth, protocol, unix):
    r = connect(kvtierd_auth, protocol, unix, password=PASSWORD)
    assert r.set("lib", protocol) is True
    assert r.get("lib") == str(protocol).encode()
    r.close()
    bad = connect(kvtierd_auth, protocol, unix, password="nope")
    with pytest.raises(redis.AuthenticationError):
        bad.ping()
    bad.close()


def test_auth_as_default_user_and_hello_auth(kvtierd_auth):
    with RawClient((kvtierd_auth.host, kvtierd_auth.port)) as c:
        assert str(c.call("AUTH", "someone", PASSWORD)).startswith("WRONGPASS")
        assert str(c.call("HELLO", "3")).startswith("NOAUTH HELLO must be called")
        assert c.call("AUTH", "default", PASSWORD) == b"OK"
        assert c.call("DBSIZE") >= 0
    r3 = connect(kvtierd_auth, protocol=3, username="default", password=PASSWORD)
    assert r3.ping() is True
    assert r3.execute_command("HELLO", "3")[b"proto"] == 3
    r3.close()


def test_pre_auth_frame_limits(kvtierd_auth):
    r = connect(kvtierd_auth, single_connection_client=True)
    # Before AUTH a bulk string is limited to 4 KiB: a larger one ends the connection.
    with pytest.raises((redis.ConnectionError, redis.ResponseError)):
        r.execute_command("PING", "x" * 10000)
    r.close()
    assert connect(kvtierd_auth, password=PASSWORD).ping()


def rss_anon_bytes(daemon):
    """The daemon's private resident memory: its heap and stacks, not the arena (a memfd)."""
    with open(f"/proc/{daemon.proc.pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/PID/status")


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_values_of_64_mib_without_a_copy_held_in_the_daemon(kvtierd, unix):
    """An LMCache chunk of 256 tokens of an 8B model is 32 MiB: values of 64 MiB are stored and
    served over both transports, and the daemon holds no more than one value's worth of memory
    beyond its arena meanwhile (large values go into their slot as they arrive, and out of it)."""
    r = connect(kvtierd, 3, unix)
    value = os.urandom(1 << 20) * 64
    before = rss_anon_bytes(kvtierd)
    for i in range(3):
        key = f"big64:{unix}:{i}"
        assert r.set(key, value) is True
        assert r.get(key) == value
        assert r.delete(key) == 1
    grown = rss_anon_bytes(kvtierd) - before
    assert grown <= len(value), f"kvtierd's private memory grew by {grown >> 20} MiB"
    r.close()
