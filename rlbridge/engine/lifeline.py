"""The engine process dies with its parent, and takes its whole process tree with it.

The user's `rlbridge train` launches the engine (`python -m rlbridge.engine.child`) in its own
session and hands it the read end of a pipe whose write end only the parent holds. When the parent
dies, however it dies (SIGKILL, the OOM killer, a closed terminal), the kernel closes the write end:
the engine's watchdog thread sees end-of-file (and, as a fallback, its parent pid changing), marks
the run killed in the run directory, and stops every descendant (Ray's GCS and raylet, Ray workers,
vLLM engines): SIGTERM, then SIGKILL after a grace period. The engine process is a child subreaper
(prctl PR_SET_CHILD_SUBREAPER), so descendants whose own parent died are re-parented to it and are
still found. Linux only; elsewhere the watchdog polls the parent pid and kills the process group.

Standard library only: this runs in every engine environment.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rlbridge.helpers import pid_alive as _alive  # the one copy (tests and the suite import it from here)

LIFELINE_FD_ENV = "RLBRIDGE_LIFELINE_FD"
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process instead of init (Linux >= 3.4)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _parents() -> dict[int, int]:
    """pid -> ppid of every process visible in /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: the fields after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            out[int(entry)] = int(fields[1])
    return out


def descendants(pid: int | None = None) -> list[int]:
    """Pids of every live descendant of `pid` (default: this process), children first."""
    root = os.getpid() if pid is None else pid
    if not os.path.isdir("/proc"):
        return []
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out, todo = [], list(children.get(root, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _reap() -> None:
    """Collect exited children (a subreaper inherits orphans and must wait for them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants(
    grace_s: float = 3.0, pid: int | None = None, exclude: set[int] | frozenset[int] = frozenset()
) -> list[int]:
    """SIGTERM every descendant (but `exclude`), wait up to `grace_s`, SIGKILL what is left (new
    descendants included). Returns the pids that were signalled."""
    signalled: list[int] = []
    deadline = time.time() + grace_s
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = [p for p in descendants(pid) if p not in exclude and (p not in signalled or sig == signal.SIGKILL)]
        for p in targets:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                continue
            if p not in signalled:
                signalled.append(p)
        if sig == signal.SIGTERM:
            while time.time() < deadline and any(_alive(p) for p in descendants(pid) if p not in exclude):
                if pid is None:
                    _reap()
                time.sleep(0.1)
    end = time.time() + 5.0
    while time.time() < end and any(_alive(p) for p in signalled):
        if pid is None:
            _reap()
        time.sleep(0.05)
    return signalled


def mark_killed(run_dir: Path | str | None, reason: str) -> None:
    """Record in the run directory that the run was killed (read by the next `rlbridge train`)."""
    if not run_dir:
        return
    path = Path(run_dir) / "run_state.json"
    try:
        state = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        state = {}
    state.update(status="killed", reason=reason, detected_by=f"engine process {os.getpid()}", ended=time.time())
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


class ParentWatch(threading.Thread):
    """Waits for the parent to go (lifeline EOF, or the parent pid changing); then stops the tree."""

    def __init__(
        self,
        lifeline_fd: int | None,
        run_dir: str | None,
        grace_s: float = 3.0,
        on_orphaned: Callable[[str], None] | None = None,
        poll_s: float = 1.0,
    ) -> None:
        super().__init__(name="rlbridge-parent-watch", daemon=True)
        self.fd = lifeline_fd
        self.run_dir = run_dir
        self.grace_s = grace_s
        self.parent = os.getppid()
        self.poll_s = poll_s
        self.on_orphaned = on_orphaned

    def run(self) -> None:
        while True:
            if self.fd is not None:
                ready, _, _ = select.select([self.fd], [], [], self.poll_s)
                if ready:
                    try:
                        data = os.read(self.fd, 64)
                    except OSError:
                        data = b""
                    if not data:
                        break
                    continue
            else:
                time.sleep(self.poll_s)
            if os.getppid() != self.parent:
                break
        self.orphaned(f"the rlbridge process (pid {self.parent}) that launched the engine died")

    def orphaned(self, reason: str) -> None:
        try:
            mark_killed(self.run_dir, reason)
            if self.on_orphaned is not None:
                self.on_orphaned(reason)
            try:  # stderr may be a pipe to the dead parent: writing to it can fail
                sys.stderr.write(f"rlbridge: {reason}; stopping the engine's process tree\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            kill_descendants(self.grace_s)
        finally:
            os._exit(137)


def install(run_dir: str | None = None, grace_s: float = 3.0) -> ParentWatch:
    """What the engine process does first: become a subreaper and watch its parent."""
    become_subreaper()
    fd = os.environ.get(LIFELINE_FD_ENV)
    watch = ParentWatch(int(fd) if fd else None, run_dir, grace_s)
    watch.start()
    return watch
