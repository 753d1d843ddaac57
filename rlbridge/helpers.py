"""Small helpers every layer uses, one copy each. A leaf: it imports nothing from rlbridge (the bottom
layer, beside machine and errors)."""

from __future__ import annotations

import os
from typing import Any


def flatten(data: dict[str, Any] | list[Any], prefix: str = "", lists: bool = False) -> dict[str, Any]:
    """Nested dicts as dotted keys: {'training': {'steps': 2}} -> {'training.steps': 2}, each key
    after `prefix` (e.g. 'launch.'). An empty dict stays a leaf; with `lists`, list items are keyed
    by their index ('reward.0.name'), else a list is a leaf."""
    flat: dict[str, Any] = {}
    for key, value in data.items() if isinstance(data, dict) else enumerate(data):
        name = f"{prefix}{key}"
        if (isinstance(value, dict) or (lists and isinstance(value, list))) and value:
            flat.update(flatten(value, f"{name}.", lists))
        else:
            flat[name] = value
    return flat


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"  # the state field, after the command name
    except OSError:  # gone between the two looks
        return False


def process_tree_rss(pid: int) -> int:
    """Resident memory of process `pid` and all its descendants, in bytes (0 once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on, for a server another process binds later.

    Chosen at random below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768 up) and
    above Ray's worker ports (10002-19999): a port from `bind(0)` is the next one any process on the
    machine may be handed before ours binds it (two Ray clusters starting at once lost a dashboard
    port that way), while one outside both ranges is only taken by another explicit choice."""
    import random
    import socket

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            ephemeral_low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    candidates = range(20000, ephemeral_low)
    for port in random.sample(candidates, min(64, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # everything tried was taken: let the kernel choose
        s.bind((host, 0))
        return s.getsockname()[1]
