"""Ports for the servers the tests start (kvtierd, redis-server and its cluster nodes), drawn below
the ports the kernel gives outgoing connections (ip_local_port_range, 32768 up by default). The
tests open thousands of connections: a port taken from that range, checked free here and bound by
its server a moment later, could meanwhile become the local port of one of them."""
import collections
import random
import socket

_LOWEST = 10000
# Ports handed out lately: one drawn for a server that has not bound it yet is not drawn again.
_recent = collections.deque(maxlen=512)


def ephemeral_ports_start():
    """Where the kernel starts picking ports for outgoing connections (32768 by default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _draw(lowest, highest, offsets, taken):
    """A port in [lowest, highest] that, with each of `offsets` added, binds now and is neither in
    `taken` nor handed out lately."""
    while True:
        port = random.randint(lowest, highest)
        if port in taken or port in _recent:
            continue
        try:
            for p in (port + o for o in offsets):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        _recent.append(port)
        return port


def free_port(taken=()):
    """A free port for a server (10000 up to the outgoing range)."""
    highest = ephemeral_ports_start() - 1
    return _draw(_LOWEST, highest if highest > _LOWEST + 1024 else 60000, (0,), taken)


def free_cluster_port(taken=()):
    """A free port whose cluster bus port (port + 10000, Redis' rule) is free and valid too, both
    below the outgoing range (20000-22767 by default); `taken`: drawn already for a node not
    listening yet."""
    highest = ephemeral_ports_start() - 1 - 10000
    return _draw(20000, highest if highest >= 20000 + 64 else 50000, (0, 10000), taken)
