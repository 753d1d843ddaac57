"""Failure forensics of a Ray run: which engine process died, its first error lines and its log
(from the Ray logs rlbridge.engine.ray_cluster keeps in the run directory)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


_PID = re.compile(r"\bpid[=:]\s*(\d+)")
_CLASS = re.compile(r"class_name:\s*(\S+)")
_TASK = re.compile(r"ray::([\w.]+)")


def describe_ray_failure(exc: BaseException, logs: Path) -> dict[str, Any]:
    """Which engine process died, its first error lines and its log. Ray nests errors (the driver's
    task failed because an actor it called died...): the innermost actor Ray names, with its pid, is
    the process that died; its own log is used when it wrote an error there, else Ray's error."""
    text = f"{type(exc).__name__}: {exc}"
    pids = _PID.findall(text)
    classes = [c.split(".")[-1] for c in _CLASS.findall(text)]
    tasks = _TASK.findall(text)
    pid = pids[-1] if pids else None
    actor = classes[-1] if classes else (tasks[-1] if tasks else None)
    process = " ".join(
        p for p in ((f"Ray actor {actor}" if actor else "Ray driver"), f"(pid {pid})" if pid else "") if p
    )
    log = None
    if pid and logs.is_dir():
        candidates = (
            sorted(logs.glob(f"worker-*-{pid}.err"))
            + sorted(logs.glob(f"worker-*-{pid}.out"))
            + sorted(logs.glob(f"*_{pid}.log"))
        )
        log = next(
            (c for c in candidates if _error_lines(c.read_text(errors="replace").splitlines())),
            candidates[0] if candidates else None,
        )
    lines = _error_lines(log.read_text(errors="replace").splitlines()) if log else []
    if not lines:  # the process left no traceback (SIGKILL, OOM killer): Ray's account of its death
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")][-8:]
    how = next(
        (
            ln.strip()
            for ln in text.splitlines()
            if any(w in ln for w in ("Worker exit type", "SIGKILL", "exit code", "out of memory", "OOM", "SIGSEGV"))
        ),
        "",
    )
    out = {"process": process, "how": how[:300], "error": lines[:8], "log": str(log or logs)}
    if tasks and (actor is None or tasks[0] != actor) and len(pids) > 1:
        out["via"] = f"Ray task {tasks[0]} (pid {pids[0]})"
    return out


def _error_lines(lines: list[str]) -> list[str]:
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback")]
    if not starts:
        return []
    block = lines[starts[0] :]
    last = next((ln for ln in block[1:] if ln and not ln.startswith(" ")), None)
    return ([last] if last else []) + block[:7]
