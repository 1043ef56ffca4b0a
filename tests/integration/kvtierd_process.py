"""One kvtierd process for a test: where to reach it, how to start it and how to stop it.

The daemon comes from KVTIER_BIN_DIR (default <repo>/build/bin) and listens on free TCP and HTTP
ports, with its Unix socket, data directory, config file and log in a directory of the test's.
It counts as ready once it answers PING on both the Unix socket and TCP, and HTTP /healthz.
A Daemon can be stopped (or killed) and started again on the same data directory, which is how the
NVMe tests restart it.
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request

from free_ports import free_port  # noqa: F401  (re-exported for the tests)

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN_DIR = pathlib.Path(os.environ.get("KVTIER_BIN_DIR", REPO / "build" / "bin"))
START_TIMEOUT_S = 15
STOP_TIMEOUT_S = 15

# Small slabs so that several size classes fit a small arena; no mlock or huge pages so the test
# machine does not pin memory. Tests add sections of their own (store, limits).
CONFIG_YAML = """\
tiers:
  slab_bytes: {slab_bytes}
  huge_pages: false
  mlock: false
server:
  io_threads: 2
  log_level: info
"""


class Daemon:
    """One kvtierd process and where to reach it."""

    def __init__(self, workdir, password=None, host_bytes="256MiB", slab_bytes="8MiB",
                 extra_config="", nvme_bytes="0", gpu_bytes="0"):
        self.workdir = pathlib.Path(workdir)
        self.unix = str(self.workdir / "kvtierd.sock")
        self.data_dir = str(self.workdir / "data")
        self.log_path = self.workdir / "kvtierd.log"
        self.password = password
        self.host_bytes = host_bytes
        # The host tier alone unless a test asks for NVMe: its tests count evictions and drops.
        # None leaves --nvme-bytes out (the daemon's default, auto).
        self.nvme_bytes = nvme_bytes
        # No GPU tier unless a test asks for one (with gpu.fake in extra_config on machines
        # without a device): on a machine with a GPU the default (auto) would promote blocks and
        # change what the other tests count. None leaves --gpu-bytes out.
        self.gpu_bytes = gpu_bytes
        self.config_text = CONFIG_YAML.format(slab_bytes=slab_bytes) + extra_config
        self.host = "127.0.0.1"
        self.port = 0
        self.http_port = 0
        self.proc = None

    @property
    def http_url(self):
        return f"http://{self.host}:{self.http_port}"

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def nvme_dir(self):
        return pathlib.Path(self.data_dir) / "nvme"

    def start(self, extra_args=(), wait=True):
        """Starts kvtierd; extra_args (e.g. --cold-start) apply to this start only. wait=False
        returns as soon as the process runs, for a test that kills it while it starts."""
        config = self.workdir / "kvtierd.yaml"
        config.write_text(self.config_text)
        # Free ports can be taken by someone else before the daemon binds them: try a few times.
        for _ in range(5):
            self.port, self.http_port = free_port(), free_port()
            if self.port == self.http_port:
                continue
            cmd = [str(BIN_DIR / "kvtierd"), "--config", str(config), "--unix", self.unix,
                   "--port", str(self.port), "--http-port", str(self.http_port),
                   "--host-bytes", self.host_bytes, "--data-dir", self.data_dir]
            if self.nvme_bytes is not None:
                cmd += ["--nvme-bytes", str(self.nvme_bytes)]
            if self.gpu_bytes is not None:
                cmd += ["--gpu-bytes", str(self.gpu_bytes)]
            cmd += list(extra_args)
            # The password goes in the environment, as the deploy files pass it: a flag would
            # show it to every user of the machine.
            env = {k: v for k, v in os.environ.items() if k != "KVTIER_PASSWORD"}
            if self.password:
                env["KVTIER_PASSWORD"] = self.password
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env)
            if not wait or self._wait_ready():
                return
            if self.proc.poll() is None:
                break
            if "in use" not in self.log():
                break
        self.kill()
        raise RuntimeError(f"kvtierd did not become ready:\n{self.log()}")

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.ping() and self.recovered():
                return True
            time.sleep(0.05)
        return False

    def recovered(self):
        """True once the blocks found on NVMe at start-up are all served: the daemon answers
        while it adopts them (as misses until then), and the tests want the whole cold cache."""
        try:
            with urllib.request.urlopen(self.http_url + "/stats", timeout=2) as resp:
                return json.load(resp)["totals"]["pending_adoptions"] == 0
        except OSError:
            return False

    def ping(self):
        """True when the daemon answers PING on both the Unix socket and TCP, and HTTP answers
        /healthz ok (once the RESP listeners are up)."""
        try:
            for family, address in ((socket.AF_UNIX, self.unix),
                                    (socket.AF_INET, (self.host, self.port))):
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    s.settimeout(2)
                    s.connect(address)
                    s.sendall(b"PING\r\n")
                    if not s.recv(64).startswith(b"+PONG"):
                        return False
            with urllib.request.urlopen(self.http_url + "/healthz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, then the exit status (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        """SIGKILL: no clean-up at all, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
