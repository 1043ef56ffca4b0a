"""An engine integration's connection to kvtierd, made again after a failure.

kvtierd is a cache, never a dependency: when it is absent, stopped or broken, the engine must run
as if it held nothing. A failed call is logged once per outage and process (not per request, not
per connection), the connection dropped, and a new one tried at most every ``retry_s`` when the
integration next needs it; the first success after an outage is logged too. A daemon's error
answers (not outages) are logged once per error code. One Link serves one thread.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Optional

import kvtier

# Errors after which the connection is unusable: the daemon is gone, stopping or not answering.
CONNECTION_LOST = (kvtier.DeviceError, kvtier.TimeoutError, kvtier.ShuttingDownError,
                   kvtier.NotFoundError)
# Of those, the ones a new connection may cure at once: a connection broken by a restart of
# kvtierd, a namespace the new process does not know yet (or one dropped since). A timeout is not
# retried (it would double the stall).
_STALE = (kvtier.DeviceError, kvtier.NotFoundError)

# URLs whose outage has been logged in this process: every link to one daemon shares it, so that
# an outage is logged once.
_down_urls: set[Optional[str]] = set()
_down_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Engine:
    """Who the link works for, in its connections and log lines."""
    client_name: str         # the connection's CLIENT SETNAME
    logger: logging.Logger   # a child of the engine's logger, so lines come out with its own
    without_data: str        # what the engine does with the data of a failed call
    without_daemon: str      # what the engine does while kvtierd is unreachable


class Link:
    def __init__(self, url: Optional[str], timeout_s: float, retry_s: float,
                 descriptor: kvtier.NamespaceDescriptor, block_bytes: int, engine: Engine):
        self._url, self._timeout_s, self._retry_s = url, timeout_s, retry_s
        self._descriptor, self._block_bytes = descriptor, block_bytes
        self._engine = engine
        self._client: Optional[kvtier.Client] = None
        self._ns: Optional[kvtier.Namespace] = None
        self._next_try = 0.0
        self._down = False   # this link failed and has not connected since
        self._warned: set[str] = set()  # error codes already logged (daemon answers, not outages)
        self.outages = 0   # times this link lost kvtierd (each logged once per process)
        self.connects = 0  # connections made, the first included

    def twin(self) -> "Link":
        """A link of its own to the same daemon and namespace, for another thread."""
        return Link(self._url, self._timeout_s, self._retry_s, self._descriptor,
                    self._block_bytes, self._engine)

    def call(self, what: str, fn: Callable[[kvtier.Client, kvtier.Namespace], Any]) -> Any:
        """fn(client, namespace), or raises kvtier.KvtierError: the daemon's error, or
        DeviceError when there is no connection now (the caller carries on without the cache).
        fn must be safe to run twice: after a broken connection it runs once more on a new one."""
        if self._client is None:
            self._connect(what, wait=True)
            return self._run(what, fn)
        try:
            return fn(self._client, self._ns)
        except _STALE as e:
            # kvtierd may have restarted since the last call: one new connection, one retry,
            # without waiting for retry_s (if it is really gone, the connect fails at once).
            self._drop()
            self._connect(what, wait=False, error=e)
            return self._run(what, fn)
        except kvtier.KvtierError as e:
            self._failed(what, e)
            raise

    def close(self) -> None:
        self._drop()

    def _run(self, what: str, fn: Callable[[kvtier.Client, kvtier.Namespace], Any]) -> Any:
        try:
            return fn(self._client, self._ns)
        except kvtier.KvtierError as e:
            self._failed(what, e)
            raise

    def _failed(self, what: str, error: kvtier.KvtierError) -> None:
        if isinstance(error, CONNECTION_LOST):
            self._lost(what, error)
        elif error.code not in self._warned:
            self._warned.add(error.code)
            self._engine.logger.warning(
                "kvtier: %s failed (%s); %s; further %s errors are not logged", what, error,
                self._engine.without_data, error.code)

    def _connect(self, what: str, wait: bool, error: Optional[Exception] = None) -> None:
        now = time.monotonic()
        if wait and now < self._next_try:
            raise kvtier.DeviceError(f"kvtierd unreachable; next try in "
                                     f"{self._next_try - now:.1f} s") from error
        self._next_try = now + self._retry_s
        client = None
        try:
            client = kvtier.connect(self._url, timeout_s=self._timeout_s,
                                    client_name=self._engine.client_name)
            self._ns = client.register_namespace(self._descriptor, self._block_bytes)
        except kvtier.KvtierError as e:
            if client is not None:
                client.close()
            self._lost(what, e)
            raise
        self._client = client
        self.connects += 1
        if self._down:
            self._down = False
            with _down_lock:
                logged = self._url in _down_urls
                _down_urls.discard(self._url)
            if logged:
                self._engine.logger.info("kvtier: connected to kvtierd at %s again",
                                         self._url or "(default)")

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client, self._ns = None, None

    def _lost(self, what: str, error: Exception) -> None:
        self._drop()
        self._next_try = max(self._next_try, time.monotonic() + self._retry_s)
        if self._down:
            return
        self._down = True
        self.outages += 1
        with _down_lock:
            first = self._url not in _down_urls
            _down_urls.add(self._url)
        if first:
            self._engine.logger.warning(
                "kvtier: kvtierd at %s unreachable (%s: %s); %s and a new connection is tried "
                "every %.1f s", self._url or "(default)", what, error,
                self._engine.without_daemon, self._retry_s)
