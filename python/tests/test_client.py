"""The Client against a real kvtierd: both data paths, every accepted buffer shape, errors."""
import socket
import threading
import time

import numpy as np
import pytest

import kvtier

BLOCK = 64 * 1024


def register(client, name, block_bytes=BLOCK, tokens_per_block=16):
    desc = kvtier.NamespaceDescriptor(model_id=name, kv_dtype="int8", num_layers=1,
                                      num_kv_heads=1, head_dim=1,
                                      tokens_per_block=tokens_per_block, layout_tag="test")
    return client.register_namespace(desc, block_bytes)


def keys_for(ns, n, salt=0):
    return kvtier.fold_foreign_keys(ns, [(salt * 1_000_000 + i).to_bytes(8, "little") for i in range(n)])


def payload(n, block_bytes=BLOCK, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, block_bytes), dtype=np.uint8)


@pytest.fixture(params=["shm", "inline-unix", "inline-tcp"])
def client(request, unix_url, tcp_url):
    url = tcp_url if request.param == "inline-tcp" else unix_url
    c = kvtier.connect(url, attach=request.param == "shm")
    assert c.attached == (request.param == "shm")
    yield c
    c.close()


def test_put_get_one_contiguous_array(client, request):
    ns = register(client, "contiguous-" + request.node.callspec.id)
    keys, data = keys_for(ns, 8), payload(8)
    statuses = client.put(ns, keys, data)
    assert [s.code for s in statuses] == ["OK"] * 8 and all(statuses)
    assert [s.code for s in client.put(ns, keys, data)] == ["ALREADY_EXISTS"] * 8
    out = np.zeros_like(data)
    assert client.get(ns, keys, out) == 8
    assert np.array_equal(out, data)
    assert client.lookup(ns, keys).prefix == 8
    assert client.lookup(ns, keys).tiers == ["host"] * 8


def test_get_stops_at_the_first_miss(client, request):
    ns = register(client, "miss-" + request.node.callspec.id)
    keys, data = keys_for(ns, 6), payload(6, seed=1)
    client.put(ns, keys[:3] + keys[4:], np.concatenate([data[:3], data[4:]]))
    out = np.zeros_like(data)
    assert client.lookup(ns, keys).prefix == 3
    assert client.get(ns, keys, out) == 3
    assert np.array_equal(out[:3], data[:3])


def test_lookup_many_answers_each_chain_in_one_round_trip(client, request):
    ns = register(client, "many-" + request.node.callspec.id)
    a, b = keys_for(ns, 4, salt=1), keys_for(ns, 3, salt=2)
    client.put(ns, a[:2], payload(2, seed=2))
    client.put(ns, b, payload(3, seed=3))
    trips = client.counters["round_trips"]
    found = client.lookup_many(ns, [a, [], b])
    assert client.counters["round_trips"] == trips + 1
    assert [f.prefix for f in found] == [2, 0, 3]
    assert found[2].tiers == ["host"] * 3
    assert client.lookup_many(ns, []) == []


def test_lists_of_buffers(client, request):
    ns = register(client, "lists-" + request.node.callspec.id)
    keys, data = keys_for(ns, 3), payload(3, seed=2)
    client.put(ns, keys, [bytes(data[0]), bytearray(data[1]), memoryview(data[2])])
    outs = [bytearray(BLOCK) for _ in range(3)]
    assert client.get(ns, keys, outs) == 3
    assert [bytes(o) for o in outs] == [bytes(d) for d in data]
    assert client.get_bytes(ns, keys) == [bytes(d) for d in data]


def test_token_strided_parts(client, request):
    # Two "layers" shaped [heads=3, tokens=40, inner=8] of float32: block = 2 x 3 x 16 x 8 x 4 B.
    rng = np.random.default_rng(3)
    parts = [rng.standard_normal((3, 40, 8), dtype=np.float32) for _ in range(2)]
    ns = register(client, "strided-" + request.node.callspec.id, block_bytes=2 * 3 * 16 * 8 * 4)
    keys = keys_for(ns, 2)
    assert all(client.put_kv(ns, keys, parts))
    out = [np.zeros((3, 32, 8), np.float32) for _ in range(2)]
    assert client.get_kv(ns, keys, out) == 2
    for p, o in zip(parts, out):
        assert np.array_equal(p[:, :32], o)
    # The payload is the blocks' bytes in (part, head, token) order.
    blob = np.zeros((1, ns.block_bytes), np.uint8)
    client.get(ns, keys[1:], blob)
    expected = np.concatenate([p[:, 16:32].reshape(-1) for p in parts]).view(np.uint8)
    assert np.array_equal(blob[0], expected)
    # start_token offsets into the parts; a token-strided (non-dense) view works too.
    keys2 = keys_for(ns, 1, salt=1)
    wide = [np.ascontiguousarray(p.transpose(1, 0, 2)).transpose(1, 0, 2) for p in parts]
    assert all(client.put_kv(ns, keys2, wide, start_token=16))
    assert client.get_bytes(ns, keys2)[0] == blob[0].tobytes()


def test_torch_tensors(client, request):
    torch = pytest.importorskip("torch")
    ns = register(client, "torch-" + request.node.callspec.id, block_bytes=2 * 4 * 16 * 8 * 2)
    keys = keys_for(ns, 2)
    parts = [torch.randn(1, 4, 32, 8, dtype=torch.bfloat16)[0] for _ in range(2)]
    assert all(client.put_kv(ns, keys, parts))
    out = [torch.zeros(4, 32, 8, dtype=torch.bfloat16) for _ in range(2)]
    assert client.get_kv(ns, keys, out) == 2
    assert all(torch.equal(p, o) for p, o in zip(parts, out))
    flat = torch.zeros(2, ns.block_bytes // 4, dtype=torch.float32)
    assert client.get(ns, keys, flat) == 2
    # A conjugate (or negative) view is stored resolved, but cannot be filled in place: a get
    # into it would fill a copy and report success.
    complex_keys = keys_for(ns, 2, salt=9)
    stored = torch.randn(2, ns.block_bytes // 8, dtype=torch.complex64)
    assert [s.code for s in client.put(ns, complex_keys, stored.conj())] == ["OK"] * 2
    back = torch.zeros_like(stored)
    assert client.get(ns, complex_keys, back) == 2
    assert torch.equal(back, stored.conj().resolve_conj())
    with pytest.raises(kvtier.InvalidArgumentError, match="in place"):
        client.get(ns, complex_keys, torch.zeros_like(stored).conj())


def test_wrong_sizes_are_invalid_arguments(client, request):
    ns = register(client, "sizes-" + request.node.callspec.id)
    keys = keys_for(ns, 2)
    with pytest.raises(kvtier.InvalidArgumentError, match="blocks: 2 blocks"):
        client.put(ns, keys, np.zeros(BLOCK, np.uint8))
    with pytest.raises(kvtier.InvalidArgumentError, match=r"blocks\[1\]"):
        client.put(ns, keys, [bytes(BLOCK), bytes(5)])
    with pytest.raises(kvtier.InvalidArgumentError, match="not a writable buffer"):
        client.get(ns, keys, [bytes(BLOCK), bytes(BLOCK)])
    with pytest.raises(kvtier.InvalidArgumentError, match="not C-contiguous"):
        client.put(ns, keys, np.zeros((BLOCK, 2), np.uint8).T)
    with pytest.raises(kvtier.InvalidArgumentError, match="buffer protocol"):
        client.put(ns, keys, [object(), object()])
    with pytest.raises(kvtier.InvalidArgumentError, match="16"):
        client.lookup(ns, [b"too short"])
    # A hand-built namespace whose sizes overflow: refused, not wrapped into a size that passes.
    huge = kvtier.Namespace(ns.id, block_bytes=2**63, tokens_per_block=2**31)
    with pytest.raises(kvtier.InvalidArgumentError, match="overflows"):
        client.put(huge, keys, np.zeros(0, np.uint8))
    with pytest.raises(kvtier.InvalidArgumentError, match="overflows"):
        client.put_kv(huge, keys, [np.zeros((1, 4, 8), np.uint8)], start_token=2**64 - 2**31)
    assert client.usable  # local checks leave the connection usable


def test_unknown_namespace(client):
    ns = kvtier.Namespace(b"\x01" * 16, block_bytes=BLOCK, tokens_per_block=16)
    keys = keys_for(ns, 2)
    assert client.lookup(ns, keys).prefix == 0
    assert [s.code for s in client.put(ns, keys, payload(2))] == ["NOT_FOUND"] * 2
    with pytest.raises(kvtier.NotFoundError):
        client.drop(ns)


def test_pin_delete_drop_stats(unix_url):
    with kvtier.connect(unix_url) as c:
        ns = register(c, "admin")
        keys = keys_for(ns, 4)
        c.put(ns, keys, payload(4))
        assert c.pin(ns, keys, ttl_s=60) == 4
        assert c.pin(ns, keys, ttl_s=0) == 4
        assert c.delete(ns, keys[2:]) == 2
        assert c.lookup(ns, keys).prefix == 2
        stats = c.stats()
        assert stats["totals"] is not None and "namespaces" in stats
        assert c.drop(ns) == 2
        assert c.counters["round_trips"] > 0
    assert c.closed
    with pytest.raises(kvtier.InvalidArgumentError, match="closed"):
        c.ping()


def test_shm_needs_a_unix_socket(tcp_url):
    c = kvtier.connect(tcp_url)
    assert not c.attached
    with pytest.raises(kvtier.InvalidArgumentError, match="unix://"):
        c.attach()
    ns = register(c, "no-shm")
    with pytest.raises(kvtier.InvalidArgumentError, match="not attached"):
        c.put(ns, keys_for(ns, 1), payload(1), path="shm")
    with pytest.raises(kvtier.InvalidArgumentError, match="path"):
        c.put(ns, keys_for(ns, 1), payload(1), path="carrier-pigeon")


def test_connection_errors(tmp_path):
    with pytest.raises(kvtier.NotFoundError, match="kvtierd running"):
        kvtier.connect(f"unix://{tmp_path}/none.sock")
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.connect("http://example")


@pytest.fixture
def silent_daemon(tmp_path):
    """A Unix socket that accepts connections and never answers: a stalled daemon."""
    path = str(tmp_path / "silent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    accepted = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except socket.timeout:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield "unix://" + path
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_timeout_under_a_millisecond_is_not_forever(silent_daemon):
    c = kvtier.Client(silent_daemon, timeout_s=0.0005, attach=False)
    started = time.monotonic()
    with pytest.raises(kvtier.TimeoutError):
        c.ping()
    assert time.monotonic() - started < 5
    with pytest.raises(kvtier.InvalidArgumentError, match="timeout_s"):
        kvtier.Client(silent_daemon, timeout_s=-1, attach=False)


def test_asking_whether_closed_does_not_hold_the_interpreter(silent_daemon):
    # One thread waits for the daemon's answer inside a call; another asks `closed`, which waits
    # for that call: it must do so without the GIL, or every Python thread stops with it.
    c = kvtier.Client(silent_daemon, timeout_s=1.5, attach=False)
    pinging = threading.Thread(target=lambda: pytest.raises(kvtier.TimeoutError, c.ping))
    pinging.start()
    time.sleep(0.2)
    ticks = [0]
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    before = ticks[0]
    assert not c.closed
    during = ticks[0] - before
    stop.set()
    ticker.join()
    pinging.join()
    # About 1.3 s passed in `closed`; a ticker frozen by the GIL advances once at most.
    assert during > 10, f"other threads advanced {during} times while `closed` waited"


def test_authentication(kvtierd_auth):
    url = "unix://" + kvtierd_auth.unix
    with pytest.raises(kvtier.PermissionDeniedError) as info:
        kvtier.connect(url, password="wrong")
    assert isinstance(info.value, PermissionError) and info.value.code == "PERMISSION_DENIED"
    with kvtier.connect(url, password="s3cret") as c:
        c.ping()
        assert c.attached


def test_daemon_errors_carry_the_daemon_message(unix_url):
    c = kvtier.connect(unix_url)
    with pytest.raises(kvtier.NotFoundError, match="namespace 0101.* is not registered"):
        c.drop(kvtier.Namespace(b"\x01" * 16, block_bytes=1, tokens_per_block=1))
    # A block larger than the 1 GiB host tier is refused per key (at KVT.RESERVE: no byte is
    # copied, and np.zeros leaves the pages untouched); raise_for_statuses raises it.
    ns = register(c, "too-big", block_bytes=1536 << 20)
    statuses = c.put(ns, [b"\x02" * 16], np.zeros((1, 1536 << 20), np.uint8), path="shm")
    assert [s.code for s in statuses] == ["REJECTED"] and not statuses[0].stored
    with pytest.raises(kvtier.RejectedError, match="key 0"):
        kvtier.raise_for_statuses(statuses)
    assert c.usable


def test_threads_share_one_client(unix_url):
    # Calls release the GIL and serialise on the connection: several threads, one client.
    c = kvtier.connect(unix_url)
    ns = register(c, "threads")
    errors = []

    def work(t):
        try:
            keys, data = keys_for(ns, 16, salt=t), payload(16, seed=t)
            for _ in range(5):
                c.put(ns, keys, data)
                out = np.zeros_like(data)
                assert c.get(ns, keys, out) == 16 and np.array_equal(out, data)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_paged_parts(client, request):
    # Three "layers" of 10 pages each; the third is a strided view (page stride 2x the page).
    rng = np.random.default_rng(4)
    layers = [rng.standard_normal((10, 4, 8), dtype=np.float32) for _ in range(2)]
    wide = rng.integers(0, 256, (10, 2, 128), dtype=np.uint8)
    pages = layers + [wide[:, 0, :]]
    ns = register(client, "paged-" + request.node.callspec.id, block_bytes=3 * 128)
    keys = keys_for(ns, 3)
    assert all(client.put_pages(ns, keys, pages, [7, 2, 9]))
    blob = np.zeros((3, ns.block_bytes), np.uint8)
    assert client.get(ns, keys, blob) == 3
    for i, page in enumerate([7, 2, 9]):
        expected = np.concatenate([layers[0][page].view(np.uint8).ravel(),
                                   layers[1][page].view(np.uint8).ravel(), wide[page, 0]])
        assert np.array_equal(blob[i], expected)
    out = [np.zeros_like(layers[0]), np.zeros_like(layers[1]), np.zeros((10, 2, 128), np.uint8)[:, 1, :]]
    assert client.get_pages(ns, keys, out, [0, 1, 5]) == 3
    assert np.array_equal(out[0][[0, 1, 5]], layers[0][[7, 2, 9]])
    assert np.array_equal(out[2][5], wide[9, 0])
    with pytest.raises(kvtier.InvalidArgumentError, match="outside"):
        client.put_pages(ns, keys[:1], pages, [10])
    with pytest.raises(kvtier.InvalidArgumentError, match="block ids"):
        client.put_pages(ns, keys, pages, [1])
    with pytest.raises(kvtier.InvalidArgumentError, match="not C-contiguous"):
        client.put_pages(ns, keys[:1], [layers[0][:, :, :4]] * 6, [0])
