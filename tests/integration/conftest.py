"""Fixtures that run a real kvtierd process for the integration tests.

Teardown sends SIGTERM and checks a graceful stop: exit status 0 and the socket file removed.
`kvtierd` is shared by the tests of one module (cheap to start, and the tests use keys and
namespaces of their own); `kvtierd_auth` runs with a password.
"""
import os

import pytest

from helpers import PASSWORD
from kvtierd_process import Daemon


def run_daemon(tmp_path_factory, **kwargs):
    # tmp_path_factory's directories are short enough for the 107-byte limit on socket paths.
    workdir = tmp_path_factory.mktemp("kvtierd")
    daemon = Daemon(workdir, **kwargs)
    daemon.start()
    try:
        yield daemon
    finally:
        rc = daemon.stop()
        log = daemon.log()
    assert rc == 0, f"kvtierd did not stop cleanly (status {rc}):\n{log}"
    assert not os.path.exists(daemon.unix), "kvtierd left its socket file behind"


@pytest.fixture(scope="module")
def kvtierd(tmp_path_factory):
    yield from run_daemon(tmp_path_factory)


@pytest.fixture(scope="module")
def kvtierd_auth(tmp_path_factory):
    yield from run_daemon(tmp_path_factory, password=PASSWORD)
