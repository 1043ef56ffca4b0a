"""Starting and stopping kvtierd: a graceful stop with busy clients, stale and live socket files,
a data directory in use, bad flags."""
import pathlib
import signal
import socket
import subprocess
import sys

import pytest

from helpers import RawClient, as_dict, pack_keys, register_args, wait_for
from kvtierd_process import BIN_DIR, Daemon

CHILD = pathlib.Path(__file__).with_name("shm_child.py")


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    d.start()
    yield d
    d.kill()  # a test that stopped it already checked how


def kvtierd_once(tmp_path, *args, timeout=15):
    """Runs kvtierd expecting it to exit by itself; returns (status, output). Without an NVMe
    tier: the default size (auto) would preallocate a tenth of the free disk in tmp_path."""
    done = subprocess.run([str(BIN_DIR / "kvtierd"), "--nvme-bytes", "0", *args],
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_graceful_stop_with_busy_clients(daemon, sig):
    block_bytes = 64 << 10
    with RawClient(daemon.unix) as c:
        ns = as_dict(c.call(*register_args("life/busy", block_bytes)))["ns"].decode()
        keys = pack_keys(range(4))
        assert c.call("KVT.PUT", ns, keys, *[b"b" * block_bytes] * 4) == [b"OK"] * 4
        assert c.call("SET", "big", b"v" * (2 << 20)) == b"OK"

    clients = []
    idle = RawClient((daemon.host, daemon.port))
    assert idle.call("PING") == b"PONG"
    clients.append(idle)
    # Stalled in the middle of a frame.
    stalled = socket.create_connection((daemon.host, daemon.port))
    stalled.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\npartial")
    # Asks for far more reply bytes than the socket buffers hold, and never reads them.
    hog = socket.socket(socket.AF_UNIX)
    hog.connect(daemon.unix)
    hog.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 64)
    # Holding leases, and reservations with half-written payloads.
    readers = [subprocess.Popen([sys.executable, str(CHILD), daemon.unix, ns, "0", "4",
                                 str(block_bytes), "acquire"], stdout=subprocess.PIPE, text=True)]
    writers = [subprocess.Popen([sys.executable, str(CHILD), daemon.unix, ns, "10", "4",
                                 str(block_bytes), "reserve"], stdout=subprocess.PIPE, text=True)]
    try:
        for child in readers + writers:
            assert child.stdout.readline().startswith("READY")
        # The reader holds 4 leases; each of the hog's GETs keeps the value leased until its
        # bytes are on the socket, which they never fully are.
        with RawClient(daemon.unix) as c:
            def held():
                totals = c.stats()["totals"]
                return (totals["leases_active"], totals["blocks_writing"])
            assert wait_for(lambda: held()[0] >= 5 and held()[1] == 4, 10), held()

        daemon.proc.send_signal(sig)
        assert daemon.proc.wait(timeout=15) == 0, daemon.log()
        assert not pathlib.Path(daemon.unix).exists()
        assert "stopped with 5 blocks cached, 0 leases left" in daemon.log()
        # Every client sees its connection end.
        stalled.settimeout(5)
        assert stalled.recv(100) == b""
    finally:
        for child in readers + writers:
            child.kill()
            child.wait()
            child.stdout.close()
        for c in clients:
            c.close()
        stalled.close()
        hog.close()


def test_stale_socket_file_is_replaced(tmp_path):
    d = Daemon(tmp_path)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(d.unix)
    stale.close()  # the file stays, with nobody listening: what a killed daemon leaves
    assert pathlib.Path(d.unix).is_socket()
    d.start()
    try:
        with RawClient(d.unix) as c:
            assert c.call("PING") == b"PONG"
    finally:
        assert d.stop() == 0


def test_live_socket_is_not_taken_over(daemon, tmp_path):
    rc, out = kvtierd_once(tmp_path, "--unix", daemon.unix, "--port", "0", "--http-port", "0",
                           "--host-bytes", "16MiB", "--data-dir", str(tmp_path / "other"))
    assert rc != 0
    assert "another server is listening there" in out
    with RawClient(daemon.unix) as c:
        assert c.call("PING") == b"PONG"
    assert daemon.stop() == 0
    assert not pathlib.Path(daemon.unix).exists()


def test_data_dir_in_use_is_refused(daemon, tmp_path):
    rc, out = kvtierd_once(tmp_path, "--unix", str(tmp_path / "second.sock"), "--port", "0",
                           "--http-port", "0", "--host-bytes", "16MiB",
                           "--data-dir", daemon.data_dir)
    assert rc == 1
    assert "is in use by another kvtierd" in out
    assert not (tmp_path / "second.sock").exists()
    with RawClient(daemon.unix) as c:
        assert c.call("PING") == b"PONG"


def test_busy_tcp_port_fails_start_and_leaves_no_socket(daemon, tmp_path):
    sock = str(tmp_path / "third.sock")
    rc, out = kvtierd_once(tmp_path, "--unix", sock, "--port", str(daemon.port),
                           "--http-port", "0", "--host-bytes", "16MiB",
                           "--data-dir", str(tmp_path / "third"))
    assert rc == 1, out
    assert "in use" in out
    assert not pathlib.Path(sock).exists(), "a failed start left its socket file behind"


@pytest.mark.parametrize("busy", ["port", "http-port"])
def test_a_start_that_cannot_listen_writes_nothing(daemon, tmp_path, busy):
    """Regression: the listeners were bound after the tiers had opened, so a port in use failed
    the start only once the NVMe tier had preallocated its file in a fresh data directory."""
    data_dir = tmp_path / "fresh"
    sock = tmp_path / "fresh.sock"
    ports = {"port": "0", "http-port": "0", busy: str(daemon.port)}
    done = subprocess.run([str(BIN_DIR / "kvtierd"), "--unix", str(sock), "--port", ports["port"],
                           "--http-port", ports["http-port"], "--host-bytes", "16MiB",
                           "--nvme-bytes", "64MiB", "--data-dir", str(data_dir)],
                          capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
    out = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 1, out
    assert "in use" in out and ("listen." + busy.replace("-", "_")) in out, out
    assert not data_dir.exists(), list(data_dir.rglob("*"))
    assert not sock.exists()


def test_a_unix_socket_path_too_long_is_a_config_error(tmp_path):
    sock = tmp_path / ("s" * (120 - len(str(tmp_path))))
    rc, out = kvtierd_once(tmp_path, "--unix", str(sock), "--port", "0", "--http-port", "0",
                           "--host-bytes", "16MiB", "--data-dir", str(tmp_path / "d"))
    assert rc == 2, out
    assert "listen.unix" in out and "at most 107" in out, out
    assert not (tmp_path / "d").exists()


def test_a_host_tier_larger_than_memory_is_refused(tmp_path):
    """Regression: --host-bytes beyond the machine's memory locked the arena page by page until
    the kernel killed kvtierd for memory, and others with it. Refused before any memory is
    taken (a size above what is available now but within the machine is not locked at start). (1024 TiB, so that a kvtierd without the check fails to map it rather than filling
    this machine's memory.)"""
    rc, out = kvtierd_once(tmp_path, "--unix", str(tmp_path / "s.sock"), "--port", "0",
                           "--http-port", "0", "--gpu-bytes", "0", "--host-bytes", "1024TiB",
                           "--data-dir", str(tmp_path / "d"))
    assert rc == 1, out
    assert "--host-bytes" in out and "of memory (MemTotal" in out, out
    assert not (tmp_path / "s.sock").exists()


def test_bad_flags(tmp_path):
    rc, out = kvtierd_once(tmp_path, "--no-such-flag")
    assert rc == 2 and "no-such-flag" in out
    rc, out = kvtierd_once(tmp_path, "--host-bytes", "lots", "--data-dir", str(tmp_path))
    assert rc == 2 and "host" in out.lower()


def test_port_zero_turns_tcp_off_and_http_zero_turns_http_off(tmp_path):
    sock = str(tmp_path / "only.sock")
    proc = subprocess.Popen([str(BIN_DIR / "kvtierd"), "--unix", sock, "--port", "0",
                             "--http-port", "0", "--host-bytes", "16MiB", "--nvme-bytes", "0",
                             "--data-dir", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: pathlib.Path(sock).exists(), 10)
        with RawClient(sock) as c:
            assert c.call("PING") == b"PONG"
            info = c.call("INFO", "server").decode()
        assert "tcp_port:0" in info
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=15)[0].decode()
    assert proc.returncode == 0, out
    assert "listening on tcp" not in out and "metrics on http" not in out
