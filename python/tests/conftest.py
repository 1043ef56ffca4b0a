"""Fixtures for the Python package's tests: a real kvtierd, started the way the integration suite
starts it (tests/integration/kvtierd_process.py, binaries from KVTIER_BIN_DIR, default
<repo>/build/bin), with a host tier large enough for a few hundred MiB of KV blocks."""
import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from kvtierd_process import BIN_DIR, Daemon  # noqa: E402
from resp_fault_proxy import FaultProxy  # noqa: E402


def start_daemon(tmp_path_factory, host_bytes="1GiB", slab_bytes="64MiB", **options):
    """A started Daemon; options (password, nvme_bytes, extra_config, ...) go to Daemon."""
    if not (BIN_DIR / "kvtierd").exists():
        pytest.skip(f"no kvtierd in {BIN_DIR} (set KVTIER_BIN_DIR)")
    daemon = Daemon(tmp_path_factory.mktemp("kvtierd"), host_bytes=host_bytes,
                    slab_bytes=slab_bytes, **options)
    daemon.start()
    return daemon


def stop_daemon(daemon):
    rc = daemon.stop()
    assert rc == 0, f"kvtierd did not stop cleanly (status {rc}):\n{daemon.log()}"
    assert not os.path.exists(daemon.unix), "kvtierd left its socket file behind"


@pytest.fixture(scope="module")
def kvtierd(tmp_path_factory):
    daemon = start_daemon(tmp_path_factory)
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


@pytest.fixture(scope="module")
def kvtierd_auth(tmp_path_factory):
    daemon = start_daemon(tmp_path_factory, host_bytes="64MiB", slab_bytes="8MiB",
                          password="s3cret")
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


@pytest.fixture
def proxy(kvtierd):
    """A FaultProxy in front of the module's kvtierd (TCP), passing answers through until its
    `fault` is set; closed after the test."""
    proxy = FaultProxy(kvtierd.port)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def unix_url(kvtierd):
    return "unix://" + kvtierd.unix


@pytest.fixture
def tcp_url(kvtierd):
    return f"tcp://{kvtierd.host}:{kvtierd.port}"
