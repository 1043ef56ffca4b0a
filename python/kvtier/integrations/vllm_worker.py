"""The worker side of the vLLM connector (``vllm.py`` documents the whole): each layer's cache
as per-block page views, the step's loads and saves on threads of their own beside the forward
pass (synchronous loads of CPU caches layer by layer), what is reported back to vLLM as
finished or failed, and the timings the scheduler's load-or-recompute decision needs.

``WorkerSide`` is a mixin of ``KvtierConnector``, which vLLM builds once per role: its methods
run on the worker's thread, which keeps all the connector's state; the load and save threads
(``_Mover``) touch only the pages of their jobs. It uses the state the connector sets up for
both roles: ``_layers``, ``_block_bytes``, ``_tp_rank``, ``_link``, ``_counts``, ``_note`` and
``_try``.
"""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorMetadata,
                                                                KVConnectorWorkerMetadata)

import kvtier
from kvtier import _kvtier
from kvtier.integrations.extra_config import ExtraConfig
from kvtier.integrations.link import Link
from kvtier.integrations.load_cost import slowest_tier
from kvtier.integrations.vllm_metadata import KvtierWorkerMetadata, Transfer

logger = logging.getLogger("vllm.kvtier")  # vLLM's child logger, as in vllm.py

# The longest a step with nothing to compute waits for loads before it ends (get_finished): a
# request that arrives meanwhile waits at most this long for its first step.
_IDLE_STEP_LOAD_WAIT_S = 0.02

# The most of the engine's KV blocks that saves queued on the save thread may cover. vLLM keeps a
# finished request's blocks until its saves are done: saves slower than the engine makes KV (a
# tcp:// kvtierd, nvme.write_through) would otherwise take the engine's cache away from the
# requests it runs. Past it a step's stores are dropped (uncached, counted in
# store_error_blocks), never waited for.
_SAVE_BACKLOG_SHARE = 0.25

# The most pinned host memory one transfer of a device cache stages at a time, as the C++
# client caps its own staging: a buffer sized to the whole transfer would be 16 GiB for a
# 128K-token Llama-3-8B prefix, pinned (unswappable) on every load and store.
_STAGING_CAP_BYTES = 64 << 20


def _staging_pieces(num_blocks: int, block_bytes: int, cap_bytes: int) -> list[range]:
    """Consecutive ranges of a transfer's block indexes, each of at most cap_bytes of blocks
    (one block at least, however large)."""
    per_piece = max(1, cap_bytes // block_bytes)
    return [range(i, min(i + per_piece, num_blocks)) for i in range(0, num_blocks, per_piece)]


def _count_down(counts: dict[str, int], key: str) -> bool:
    """One of key's transfers has finished; True when it was the last."""
    counts[key] -= 1
    if counts[key]:
        return False
    del counts[key]
    return True


class _Mover:
    """One kind of the worker's transfers (loads, or saves) on a thread of their own, so that the
    forward pass runs while blocks move. `run(job)` does one and returns its result (a load: the
    count of leading blocks served; a save: whether it stored). Finished jobs are taken by the
    worker's thread (take), which keeps all the connector's state: this thread touches only the
    pages its job names, which vLLM leaves alone until the job is reported finished (a load's
    blocks belong to a request waiting for them; a save's are full blocks nobody writes, held
    past their request's end until get_finished reports it, and waited for before a preemption
    lets vLLM reuse them)."""

    def __init__(self, name: str, run: Callable[[Any], Any]):
        self._run_job = run
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._done: list[tuple[Any, Any, float]] = []
        self._submitted = 0
        self._finished = 0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Any) -> int:
        """Queues job; its ticket (wait_until's): jobs run in the order of their tickets."""
        with self._cond:
            self._submitted += 1
            self._queue.put(job)
            return self._submitted

    def take(self) -> list[tuple[Any, Any, float]]:
        """The jobs finished since the last call: (job, result, seconds)."""
        with self._cond:
            done, self._done = self._done, []
        return done

    def drain(self, timeout_s: Optional[float] = None) -> None:
        """Waits until every job submitted so far has finished, or timeout_s has passed."""
        with self._cond:
            self._cond.wait_for(lambda: self._finished == self._submitted, timeout_s)

    def wait_until(self, ticket: int) -> None:
        """Waits until the job of `ticket` (submit's), and so every job before it, has finished."""
        with self._cond:
            self._cond.wait_for(lambda: self._finished >= ticket)

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            started = time.perf_counter()
            try:
                result = self._run_job(job)
            except Exception:  # noqa: BLE001  a failed transfer costs its blocks, never the engine
                logger.exception("kvtier: a transfer failed")
                result = None
            with self._cond:
                self._done.append((job, result, time.perf_counter() - started))
                self._finished += 1
                self._cond.notify_all()

    def close(self) -> None:
        """Waits for the jobs submitted so far, then ends the thread."""
        self._queue.put(None)
        self._thread.join()


@dataclasses.dataclass
class _LayeredLoad:
    """A synchronous load made layer by layer on the layer-load thread while the forward pass
    runs: the pass waits in wait_for_layer_load for each layer's pages (progress)."""
    transfer: Transfer
    progress: Any  # kvtier._kvtier.LoadProgress


@dataclasses.dataclass
class _Save:
    """A store the save thread makes; `ready`, for a device cache: an event recorded on the
    engine's stream after the step that wrote the blocks, which the copy waits for."""
    transfer: Transfer
    ready: Any = None


def _page_views(t: torch.Tensor, num_blocks: int) -> list[torch.Tensor]:
    """A layer's cache as [num_blocks, page_bytes] uint8 views, one per region of it (K and V
    separately for backends shaped (2, num_blocks, ...))."""
    if t.shape[0] == num_blocks:
        parts = [t]
    elif t.dim() > 1 and t.shape[1] == num_blocks:
        parts = [t[i] for i in range(t.shape[0])]
    else:
        raise NotImplementedError(f"kvtier: cannot find the block dimension of shape {tuple(t.shape)}")
    views = []
    for p in parts:
        inner = sorted((p.stride(d), p.shape[d]) for d in range(1, p.dim()) if p.shape[d] > 1)
        expected = 1
        for stride, size in inner:
            if stride != expected:
                raise NotImplementedError(
                    f"kvtier: a block's page is not dense (shape {tuple(p.shape)}, strides {p.stride()})")
            expected *= size
        page = torch.as_strided(p, (num_blocks, expected), (p.stride(0), 1))
        views.append(page.view(torch.uint8))
    return views


class WorkerSide:
    """KvtierConnector's worker-side methods (see the module docstring)."""

    def _init_worker_side(self, extra: ExtraConfig) -> None:
        """The worker's settings (extra config) and state; the pages and threads come with
        register_kv_caches. Set up in either role: the connector's methods for both roles
        (shutdown) read some of it."""
        self._path = extra.transfer_path()
        self._step_started: Optional[float] = None  # bind_connector_metadata of this step
        # Of this step's time, what its synchronous loads took (made in start_load_kv, or waited
        # for in wait_for_layer_load): not the recompute's price.
        self._step_load_s = 0.0
        self._pages: list[torch.Tensor] = []
        # Pages the client cannot read and write in place (a device cache's): moved through host
        # staging buffers. Set by register_kv_caches (tests set it for CPU caches too).
        self._stage = False
        self._load_errors: set[int] = set()
        self._load_exception_logged = False
        self._loading: dict[str, int] = {}  # request id -> its loads not finished yet
        self._saving: dict[str, int] = {}   # request id -> its saves not finished yet
        self._last_save: dict[str, int] = {}  # request id -> its last save's ticket (_Mover)
        # Blocks of the saves handed to the save thread and not collected yet, and the most
        # there may be (_SAVE_BACKLOG_SHARE of the engine's blocks; set by register_kv_caches).
        self._save_backlog = 0
        self._save_backlog_limit = 0
        self._backlog_logged = False
        # Finished requests whose blocks vLLM keeps until they are reported saved (the
        # scheduler's delayed_frees): reported once their saves are done.
        self._delayed_frees: set[str] = set()
        self._loader: Optional[_Mover] = None  # started by register_kv_caches
        self._saver: Optional[_Mover] = None
        self._load_link: Optional[Link] = None  # the load thread's (asynchronous loads)
        # Synchronous loads of CPU caches go layer by layer (wait_for_layer_load), on a thread of
        # their own; extra config "layerwise": false (and a CUDA cache) loads them whole before
        # the pass, on the engine's thread. Either way through a link of their own, never the
        # load thread's: a link serves one thread, and the step must not wait behind an
        # asynchronous load (a disk-bound one, say) to use it.
        self._layerwise = extra.flag("layerwise", True)
        self._layer_loader: Optional[_Mover] = None
        self._sync_link: Optional[Link] = None
        self._layer_loads: list[_LayeredLoad] = []  # this step's
        self._layer_of: dict[str, int] = {name: i for i, name in enumerate(self._layers)}
        self._parts_per_layer = 1

    def _keys_of(self, t: Transfer) -> list[bytes]:
        """t's keys in this worker's namespace (its TP rank's)."""
        return t.other_keys[self._tp_rank - 1] if self._tp_rank else t.keys

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        num_blocks = self._kv_cache_config.num_blocks
        self._save_backlog_limit = max(1, int(num_blocks * _SAVE_BACKLOG_SHARE))
        self._pages = [v for name in self._layers for v in _page_views(kv_caches[name], num_blocks)]
        self._stage = self._pages[0].device.type != "cpu"
        page_bytes = sum(p.shape[1] for p in self._pages)
        if page_bytes != self._block_bytes:
            raise ValueError(f"kvtier: pages of one block are {page_bytes} bytes, the spec says "
                             f"{self._block_bytes}")
        self._load_link = self._link.twin()
        self._sync_link = self._link.twin()
        self._loader = _Mover("kvtier-load", lambda t: self._load(t, self._load_link))
        self._parts_per_layer = len(self._pages) // len(self._layers)
        if self._layerwise and self._pages[0].device.type == "cpu":
            self._layer_loader = _Mover("kvtier-load-layers", self._load_layers)
        self._saver = _Mover("kvtier-save", self._save)  # the only user of self._link from now

    def _transfer(self, client: kvtier.Client, ns: kvtier.Namespace, t: Transfer,
                  load: bool) -> int:
        """Loads t (the count of leading blocks served) or stores it (the count of blocks stored).

        A key the daemon did not store (no room now; with nvme.write_through, one left in memory
        only) is a per-key answer, not a failure of the call: it is counted, never raised, since
        the link would take a DEVICE_ERROR or TIMEOUT raised here for a lost connection."""
        keys = self._keys_of(t)
        if self._stage:
            return self._transfer_staged(client, ns, keys, t.block_ids, load)
        if load:
            return client.get_pages(ns, keys, self._pages, t.block_ids, self._path)
        statuses = client.put_pages(ns, keys, self._pages, t.block_ids, self._path)
        return sum(s.stored for s in statuses)

    def _transfer_staged(self, client: kvtier.Client, ns: kvtier.Namespace, keys: list[bytes],
                         block_ids: list[int], load: bool) -> int:
        """_transfer of a device cache: through host buffers (pinned for CUDA) of at most
        _STAGING_CAP_BYTES, one piece of the blocks at a time, one copy each way. Each piece's
        copies are synchronous (no non_blocking), so the buffers are free for the next piece; a
        load stops at the first piece not served in full (leading blocks only count)."""
        device = self._pages[0].device
        pieces = _staging_pieces(len(keys), self._block_bytes, _STAGING_CAP_BYTES)
        rows = len(pieces[0]) if pieces else 0
        staged = [torch.empty((rows, p.shape[1]), dtype=torch.uint8,
                              pin_memory=device.type == "cuda") for p in self._pages]
        index = torch.tensor(block_ids, device=device)
        moved = 0
        for piece in pieces:
            ids, buffers = index[piece.start:piece.stop], [s[:len(piece)] for s in staged]
            piece_keys = keys[piece.start:piece.stop]
            if not load:
                for p, s in zip(self._pages, buffers):
                    s.copy_(p.index_select(0, ids))
                statuses = client.put_pages(ns, piece_keys, buffers, range(len(piece)), self._path)
                moved += sum(s.stored for s in statuses)
                continue
            served = client.get_pages(ns, piece_keys, buffers, range(len(piece)), self._path)
            for p, s in zip(self._pages, buffers):
                p.index_copy_(0, ids[:served], s[:served].to(device))
            moved += served
            if served < len(piece):
                break
        return moved

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        # vLLM binds the metadata before the forward pass and calls wait_for_save after it: the
        # pass's time (loads run beside it, on their own thread).
        super().bind_connector_metadata(connector_metadata)
        self._step_started = time.perf_counter()
        self._step_load_s = 0.0
        # The step's stores count as running from now, not from wait_for_save, which hands them
        # to the save thread: with speculative decoding vLLM calls get_finished before
        # wait_for_save (gpu_model_runner's defer_finalize), and a request finished in this
        # step must not be reported saved before these stores of its blocks have been copied.
        for t in getattr(connector_metadata, "stores", ()):
            self._saving[t.req_id] = self._saving.get(t.req_id, 0) + 1
        self._delayed_frees |= getattr(connector_metadata, "delayed_frees", set())

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Starts this step's synchronous loads (the forward pass needs them: layer by layer on
        the layer-load thread for CPU caches, else made here), and hands the others to the load
        thread; get_finished reports each of those requests once its blocks are in."""
        for t in self._get_connector_metadata().loads:
            if t.sync and self._layer_loader is not None:
                job = _LayeredLoad(t, _kvtier.LoadProgress())
                self._layer_loads.append(job)
                self._layer_loader.submit(job)
                continue
            if t.sync:
                started = time.perf_counter()
                served = self._load(t, self._sync_link)
                seconds = time.perf_counter() - started
                self._step_load_s += seconds
                self._loaded(t, served, seconds)
                continue
            self._loading[t.req_id] = self._loading.get(t.req_id, 0) + 1
            self._loader.submit(t)

    def _load(self, t: Transfer, link: Link) -> int:
        """t's blocks into vLLM's pages through link (on the load thread, or the worker's for a
        synchronous load); the count of leading blocks served. Never raises: a synchronous load
        runs in the engine's step, where an exception would end the engine, not the load."""
        try:
            served = link.call("load", lambda c, ns: self._transfer(c, ns, t, load=True))
            if self._pages[0].device.type != "cpu":
                torch.cuda.current_stream(self._pages[0].device).synchronize()  # the copies are in
        except kvtier.KvtierError:
            return 0  # logged by the link
        except Exception:  # noqa: BLE001  torch's: a pinned staging buffer, device memory, a copy
            self._load_failed_unexpectedly()
            return 0
        return served

    def _load_failed_unexpectedly(self) -> None:
        """Logs, once per connector, a load that failed with an error of its own (not kvtierd's):
        one that fails so would fail at every step."""
        if not self._load_exception_logged:
            self._load_exception_logged = True
            logger.exception("kvtier: a load failed; its blocks are recomputed (further such "
                             "failures are counted in load_error_blocks, not logged)")

    def _load_layers(self, job: _LayeredLoad) -> int:
        """On the layer-load thread: job's blocks into vLLM's pages, layer by layer; the count of
        leading blocks served. A failed try ends the load (progress finished, the forward pass
        goes on and the blocks are recomputed): the link's retry on a new connection then copies
        nothing, for the pass may be reading those pages already."""
        t = job.transfer
        keys = self._keys_of(t)
        try:
            return self._sync_link.call("load", lambda c, ns: 0 if job.progress.finished else
                                        c.get_pages_layered(ns, keys, self._pages, t.block_ids,
                                                            self._parts_per_layer, job.progress))
        except kvtier.KvtierError:
            return 0
        except Exception:  # noqa: BLE001  as in _load
            self._load_failed_unexpectedly()
            return 0
        finally:
            job.progress.finish(0)  # nothing if the load ended: the first finish counts

    def _finish_layer_loads(self) -> None:
        """After the forward pass: this step's layered loads are counted, their blocks not served
        reported to vLLM in this step (get_block_ids_with_load_errors), as a synchronous load's."""
        if not self._layer_loads:
            return
        self._layer_loader.drain()
        for job, served, seconds in self._layer_loader.take():
            self._loaded(job.transfer, served or 0, seconds)
        self._layer_loads = []

    def get_finished(self, finished_req_ids: set[str]) -> tuple[Optional[set[str]],
                                                                Optional[set[str]]]:
        """The finished requests whose saves are done, of those vLLM keeps the blocks of (named by
        the scheduler in delayed_frees: vLLM's finished_req_ids name them too, in the same
        step), and the requests whose loads have all finished; their blocks not served are
        reported by get_block_ids_with_load_errors, which vLLM calls next, in the same step."""
        self._finish_layer_loads()
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        if self._loading and meta is not None and meta.computed_tokens == 0:
            # A step with nothing to compute, only loads to wait for: waiting here (the GIL
            # released) costs the engine nothing and runs the requests a step sooner, where
            # spinning through empty steps would keep the GIL from the load thread
            # (bench/vllm_bench.py: vllm_restore_ratio_to_native_hit 2.53 before, 1.31 after).
            self._loader.drain(_IDLE_STEP_LOAD_WAIT_S)
        self._collect_saves()
        done: set[str] = set()
        for t, served, seconds in (self._loader.take() if self._loader else ()):
            self._loaded(t, served or 0, seconds)
            if _count_down(self._loading, t.req_id):
                done.add(t.req_id)
        # A request with stores held back at the scheduler is not saved yet, whether or not it
        # has saves here: its blocks must stay until those come (or are dropped). Nor is one
        # with a load still writing its blocks (the scheduler names none such: vLLM frees those
        # on finished_recving).
        withheld = meta.withheld if meta is not None else set()
        sent = {r for r in self._delayed_frees
                if r not in self._saving and r not in withheld and r not in self._loading}
        self._delayed_frees -= sent
        return sent or None, done or None

    def _loaded(self, t: Transfer, served: int, seconds: float) -> None:
        """Counts a finished load; its blocks not served go to get_block_ids_with_load_errors."""
        if served > 0 and t.tiers:
            # Timed by the slowest tier it read from (load_cost.py prices a load the same way).
            self._note("loads", [slowest_tier(t.tiers[:served]), served * self._block_bytes,
                                 seconds])
        self._note("loaded_blocks", served)
        self._note("load_error_blocks", len(t.block_ids) - served)
        # Blocks not served (evicted since the lookup, kvtierd gone or failing) are reported to
        # vLLM, which recomputes them; a block half-written by a failed call is among them.
        self._load_errors.update(t.block_ids[served:])
        self._counts["loaded_blocks"] += served
        self._counts["load_error_blocks"] += len(t.block_ids) - served

    def _collect_saves(self) -> None:
        for job, stored, _ in (self._saver.take() if self._saver else ()):
            self._save_backlog -= len(job.transfer.keys)
            self._saved(job.transfer, stored or 0)  # None: the save raised (a staging copy, say)

    def _saved(self, t: Transfer, stored: int) -> None:
        """Counts a save that has ended, having stored `stored` of t's blocks. A failed store (no
        room, kvtierd gone, a backlog too long) leaves blocks uncached; the request is
        unaffected."""
        for key, blocks in (("stored_blocks", stored), ("store_error_blocks", len(t.keys) - stored)):
            if blocks:
                self._counts[key] += blocks
                self._note(key, blocks)
        if _count_down(self._saving, t.req_id):
            self._last_save.pop(t.req_id, None)

    def wait_for_saves(self) -> None:
        """Returns once every save handed to the save thread has finished, and counted in stats()
        (tests and benchmarks read the counters after a request; shutdown waits the same way)."""
        if self._saver is not None:
            self._saver.drain()
        self._collect_saves()

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        """Before the forward pass of a step that preempted requests: their blocks may be given
        to other requests and written in this pass, so their saves must end first."""
        preempted = getattr(kv_connector_metadata, "preempted", None) or set()
        if self._saver is None or not any(r in self._saving for r in preempted):
            return
        self._collect_saves()  # saves finished since the last step need no wait
        tickets = [self._last_save[r] for r in preempted if r in self._last_save]
        if tickets:  # the saves queued after theirs are not waited for
            self._saver.wait_until(max(tickets))
            self._collect_saves()

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Before an attention layer computes: waits (the GIL released) until that layer's pages
        of this step's synchronous loads are in, or their loads have ended."""
        if not self._layer_loads:
            return
        started = time.perf_counter()
        layer = self._layer_of.get(layer_name)
        for job in self._layer_loads:
            job.progress.wait(len(self._layers) if layer is None else layer + 1)
        self._step_load_s += time.perf_counter() - started

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # whole blocks (all layers) are saved at the end of the step, in wait_for_save

    def wait_for_save(self):
        ended = time.perf_counter()  # before the layered loads' drain: that is load time too
        self._finish_layer_loads()
        meta = self._get_connector_metadata()
        if self._step_started is not None and meta.computed_tokens > 0:
            # Its time per token, less the synchronous loads', is the price of a recompute. (On a
            # GPU this is the time to launch the pass unless the step synchronises before
            # saving: an underestimate, which skips loads that might have won, never takes one
            # that loses.)
            forward_s = ended - self._step_started - self._step_load_s
            self._note("computes", [meta.computed_tokens, forward_s])
        self._step_started = None
        on_device = bool(self._pages) and self._pages[0].device.type != "cpu"
        self._collect_saves()  # their blocks leave the backlog
        for t in meta.stores:  # each counted in _saving since bind
            # One store larger than the limit still goes when nothing is queued.
            if self._save_backlog and self._save_backlog + len(t.keys) > self._save_backlog_limit:
                self._drop_save(t)
                continue
            ready = None
            if on_device:  # the copy waits for the kernels that wrote the blocks
                ready = torch.cuda.Event()
                ready.record(torch.cuda.current_stream(self._pages[0].device))
            self._save_backlog += len(t.keys)
            self._last_save[t.req_id] = self._saver.submit(_Save(t, ready))

    def _drop_save(self, t: Transfer) -> None:
        """A store the save thread has no room for (_SAVE_BACKLOG_SHARE): ended at once, uncached,
        so that no request's blocks wait for it."""
        if not self._backlog_logged:
            logger.warning("kvtier: saves to kvtierd fall behind the engine (%d blocks queued, at "
                           "most %d): stores are dropped until they catch up, so that finished "
                           "requests' blocks are not held for them (counted in "
                           "store_error_blocks; further drops are not logged)",
                           self._save_backlog, self._save_backlog_limit)
            self._backlog_logged = True
        self._saved(t, 0)

    def _save(self, job: _Save) -> int:
        """On the save thread: job's blocks out of vLLM's pages into kvtierd; how many it stored."""
        if job.ready is not None:
            torch.cuda.current_stream(self._pages[0].device).wait_event(job.ready)
        t = job.transfer
        stored = self._try(lambda c, ns: self._transfer(c, ns, t, load=False), "store")
        return stored or 0

    def build_connector_worker_meta(self) -> Optional[KVConnectorWorkerMetadata]:
        """For a step with synchronous loads: its number, so that the scheduler knows their load
        errors (reported in this output) are in, and sends the stores it held back."""
        if not self.has_connector_metadata():
            return None
        meta = self._get_connector_metadata()
        if not any(t.sync for t in meta.loads):
            return None
        return KvtierWorkerMetadata(load_steps={meta.step})

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors
