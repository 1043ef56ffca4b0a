"""The stock redis-cli and redis-benchmark binaries against kvtierd, on TCP and the Unix socket."""
import re
import shutil
import subprocess

import pytest

from helpers import PASSWORD
from kvtierd_process import Daemon

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None,
                                reason="redis-tools is not installed")


def cli(daemon, *args, unix=False, input=None, timeout=20):
    target = ["-s", daemon.unix] if unix else ["-h", daemon.host, "-p", str(daemon.port)]
    done = subprocess.run(["redis-cli", *target, *args], input=input, capture_output=True,
                          timeout=timeout)
    return done.returncode, done.stdout.decode(errors="replace").strip(), \
        done.stderr.decode(errors="replace").strip()


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_ping_set_get(kvtierd, unix):
    assert cli(kvtierd, "ping", unix=unix) == (0, "PONG", "")
    assert cli(kvtierd, "ping", "hello there", unix=unix)[1] == "hello there"
    key = f"cli:{unix}"
    assert cli(kvtierd, "set", key, "some value", unix=unix)[1] == "OK"
    assert cli(kvtierd, "get", key, unix=unix)[1] == "some value"
    assert cli(kvtierd, "exists", key, unix=unix)[1] == "1"
    assert cli(kvtierd, "del", key, unix=unix)[1] == "1"
    assert cli(kvtierd, "get", key, unix=unix)[1] == ""
    assert cli(kvtierd, "--raw", "dbsize", unix=unix)[1].isdigit()


def test_resp3_and_commands_from_stdin(kvtierd):
    rc, out, _ = cli(kvtierd, "-3", "hello", "3")
    assert rc == 0 and "kvtier" in out
    # Several commands on one connection, read from standard input.
    rc, out, _ = cli(kvtierd, input=b"set stdin:a 1\nset stdin:b 2\nmget stdin:a stdin:b\n"
                                    b"del stdin:a stdin:b\n")
    assert rc == 0
    assert out.split("\n") == ["OK", "OK", "1", "2", "2"]


def test_info(kvtierd):
    rc, out, _ = cli(kvtierd, "info")
    assert rc == 0
    for section in ("# Server", "# Clients", "# Memory", "# Stats", "# Keyspace", "# Kvtier"):
        assert section in out
    rc, out, _ = cli(kvtierd, "info", "kvtier", unix=True)
    assert rc == 0 and out.startswith("# Kvtier") and "tier_host_capacity_bytes:" in out
    assert "# Server" not in out


def test_unknown_command_then_next_connection_works(kvtierd):
    rc, out, _ = cli(kvtierd, "nosuchcommand", "a", "b")
    assert "ERR unknown command 'nosuchcommand', with args beginning with: 'a' 'b'" in out
    assert cli(kvtierd, "ping") == (0, "PONG", "")
    rc, out, _ = cli(kvtierd, "get")
    assert "wrong number of arguments for 'get' command" in out
    assert cli(kvtierd, "set", "after:error", "1")[1] == "OK"
    assert cli(kvtierd, "del", "after:error")[1] == "1"


def test_password(kvtierd_auth):
    rc, out, _ = cli(kvtierd_auth, "get", "k")
    assert "NOAUTH Authentication required" in out
    # redis-cli reports the failed AUTH and carries on; PING needs no AUTH.
    rc, out, err = cli(kvtierd_auth, "--no-auth-warning", "-a", "wrong", "ping")
    assert "AUTH failed: WRONGPASS invalid username-password pair" in err
    assert out == "PONG"
    rc, out, err = cli(kvtierd_auth, "--no-auth-warning", "-a", "wrong", "get", "k")
    assert "NOAUTH Authentication required" in out
    assert cli(kvtierd_auth, "--no-auth-warning", "-a", PASSWORD, "ping")[1] == "PONG"
    assert cli(kvtierd_auth, "--no-auth-warning", "-a", PASSWORD, "set", "cli", "x",
               unix=True)[1] == "OK"


@pytest.mark.skipif(shutil.which("redis-benchmark") is None, reason="no redis-benchmark")
@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_redis_benchmark(kvtierd, unix):
    target = ["-s", kvtierd.unix] if unix else ["-h", kvtierd.host, "-p", str(kvtierd.port)]
    done = subprocess.run(["redis-benchmark", *target, "-t", "set,get", "-n", "2000", "-c", "4",
                           "-q"], capture_output=True, timeout=60)
    out = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 0, out
    lines = [line for line in out.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if "ERR" in line or "rror" in line]
    assert errors == [], out
    finished = [line for line in lines if "requests per second" in line]
    assert any(line.startswith("SET:") for line in finished), out
    assert any(line.startswith("GET:") for line in finished), out


def _resp(*args):
    """One command in the RESP protocol, as redis-cli --pipe wants its input."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_mass_insertion_with_pipe(kvtierd, unix):
    """redis-cli --pipe (Redis' mass insertion) sends ECHO last and waits for its echo."""
    count = 2000
    stream = b"".join(_resp("SET", f"pipe:{unix}:{i}", b"v" * (i % 300 + 1)) for i in range(count))
    rc, out, err = cli(kvtierd, "--pipe", unix=unix, input=stream, timeout=60)
    assert rc == 0, (out, err)
    assert f"errors: 0, replies: {count}" in out, out
    assert cli(kvtierd, "get", f"pipe:{unix}:{count - 1}", unix=unix)[1] == "v" * ((count - 1) % 300 + 1)


def test_bigkeys_memkeys_and_stat(kvtierd):
    """redis-cli --bigkeys sizes strings with STRLEN, --memkeys with MEMORY USAGE; --stat reads
    INFO's client fields."""
    assert cli(kvtierd, "set", "big:largest", "x" * 2000)[1] == "OK"
    assert cli(kvtierd, "set", "big:small", "x")[1] == "OK"
    rc, out, _ = cli(kvtierd, "--bigkeys")
    assert rc == 0, out
    # "N strings with B bytes": B was 0 while STRLEN was unknown.
    summary = re.search(r"(\d+) strings with (\d+) bytes", out)
    assert summary and int(summary.group(2)) >= 2001, out
    # --memkeys sizes keys with MEMORY USAGE (an unknown command before: every key was 0 bytes).
    rc, out, _ = cli(kvtierd, "--memkeys")
    assert rc == 0, out
    summary = re.search(r"(\d+) strings with (\d+) bytes", out)
    assert summary and int(summary.group(2)) >= 2001 + len("big:largest"), out
    # --stat prints a line per interval until stopped, buffered without a terminal: run it for
    # a second on a pseudo-terminal.
    stat = subprocess.run(["script", "-qc", f"timeout 1 redis-cli -h {kvtierd.host} "
                           f"-p {kvtierd.port} --stat -i 0.2", "/dev/null"],
                          capture_output=True, timeout=20, input=b"")
    lines = stat.stdout.decode(errors="replace").splitlines()
    assert any("blocked" in line for line in lines), lines
    rows = [line.split() for line in lines if line[:1].isdigit()]
    assert rows and all(row[3] == "0" for row in rows), lines  # blocked clients


def test_a_small_host_tier_keeps_values_of_other_sizes(tmp_path_factory):
    """Regression: slabs were 64 MiB whatever the tier's size, so --host-bytes 64MiB was one slab
    and a value of a new size gave up every value of another size. tiers.slab_bytes: auto keeps
    32 slabs (here 2 MiB each)."""
    daemon = Daemon(tmp_path_factory.mktemp("slabs"), host_bytes="64MiB", slab_bytes="auto")
    daemon.start()
    try:
        for i in range(20):
            assert cli(daemon, "set", f"small:{i}", "v" * 10)[1] == "OK"
        for size in (5000, 20_000, 100_000):
            assert cli(daemon, "set", f"size:{size}", "x" * size)[1] == "OK"
        assert cli(daemon, "exists", *[f"small:{i}" for i in range(20)])[1] == "20"
        assert cli(daemon, "exists", "size:5000", "size:20000", "size:100000")[1] == "3"
    finally:
        rc = daemon.stop()
    assert rc == 0, daemon.log()
