"""run_state.json: what the run directory knows about the run writing it, even if that run was killed.

`rlbridge train` writes it (status 'running', its pid, host and start time) before the engine starts,
and again with the final status when it ends. A run killed with SIGKILL never gets to the second
write; its engine process (see rlbridge.engine.lifeline) marks it 'killed' as it stops the tree, and
if nothing could, the next `rlbridge train` on the directory finds a 'running' state whose process
is gone. Either way the next run reports the previous one as killed (console and
summary.json's `previous_run`), and refuses to start while a live run still writes there.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from rlbridge.errors import RLBridgeError
from rlbridge.helpers import pid_alive

STATE_FILE = "run_state.json"


def read_state(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / STATE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_state(run_dir: Path, **state: Any) -> None:
    """Atomic replace, so that a reader never sees half a file."""
    path = Path(run_dir) / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def previous_run(run_dir: Path) -> dict[str, Any] | None:
    """How the previous run in this directory ended, if it did not end cleanly: status 'killed'
    with what is known (pid, start, last step written). None for a fresh directory or a run that
    finished (completed, failed, interrupted: its summary.json says so). Raises if a live process
    still runs there."""
    state = read_state(run_dir)
    if not state or state.get("status") not in ("running", "killed"):
        return None
    pid, host = state.get("pid"), state.get("host")
    if (
        state.get("status") == "running"
        and host == socket.gethostname()
        and isinstance(pid, int)
        and pid != os.getpid()
        and pid_alive(pid)
    ):
        raise RLBridgeError(
            f"output_dir: another rlbridge run (pid {pid}, started {time.ctime(state.get('started', 0))}) is still "
            "writing "
            f"to {run_dir}; wait for it, stop it, or choose another output_dir"
        )
    out = {"status": "killed", "pid": pid, "host": host, "started": state.get("started")}
    out["reason"] = state.get("reason") or f"process {pid} on {host} ended without writing its summary (killed)"
    last = last_step(Path(run_dir) / "metrics.jsonl")
    if last is not None:
        out["last_step"] = last
    return out


def last_step(path: Path) -> int | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a half-written last line
    return None


def start(run_dir: Path, **extra: Any) -> dict[str, Any]:
    state = {"status": "running", "pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), **extra}
    write_state(run_dir, **state)
    return state


def finish(run_dir: Path, state: dict[str, Any], status: str) -> None:
    write_state(run_dir, **{**state, "status": status, "ended": time.time()})
