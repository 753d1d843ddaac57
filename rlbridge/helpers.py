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
    for key, value in (data.items() if isinstance(data, dict) else enumerate(data)):
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
