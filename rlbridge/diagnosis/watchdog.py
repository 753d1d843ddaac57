"""The hang watchdog: a run is hung when no step arrives within a bound derived from its own steps.

Before the first step of a run (or of a restart) the bound is training.hang_first_step_s (model
loading, compilation and engine start-up have no step time to learn from); after it, it is
training.hang_factor times the longest interval between two steps seen so far, at least
training.hang_min_s. Once past it, the watchdog writes the stacks of every process of the run
(rlbridge.diagnosis.stacks) to stacks/hang-N.txt and .json, names the stuck process, its role and frame,
and stops the engine: its process group when it runs in a process of its own, else the main thread
(SIGINT), so that the runner fails or restarts the run (training.on_hang).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable


from rlbridge.errors import RLBridgeError


class HangError(RLBridgeError):
    """No step arrived within the hang watchdog's bound; `failure` names the stuck process and frame."""


class HangWatchdog(threading.Thread):
    def __init__(
        self,
        ctx,
        run_dir: Path,
        training,
        attempt: int,
        stop_engine: Callable[[], None] | None = None,
        intervals: list[float] | None = None,
        poll_s: float = 0.5,
        actor_roles: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__(daemon=True, name="rlbridge-hang-watchdog")
        self.ctx = ctx
        self.run_dir = Path(run_dir)
        self.first_step_s = training.hang_first_step_s
        self.factor = training.hang_factor
        self.min_s = training.hang_min_s
        self.attempt = attempt
        self.stop_engine = stop_engine  # None: the engine is in this process's main thread
        self.intervals = intervals if intervals is not None else []  # across restarts: the run's own step times
        self.poll_s = poll_s
        self.actor_roles = actor_roles or {}  # the backend's Ray actor classes -> canonical roles (the culprit's role)
        self.done = threading.Event()
        self.fired: dict[str, Any] | None = None
        self._main = threading.main_thread().ident

    def bound(self, stepped: bool) -> float:
        if not stepped or not self.intervals:
            return float(self.first_step_s)
        return max(self.min_s, self.factor * max(self.intervals))

    def run(self) -> None:
        last_step, last_at, stepped = self.ctx.steps_emitted, time.monotonic(), False
        while not self.done.wait(self.poll_s):
            now = time.monotonic()
            if self.ctx.steps_emitted != last_step:
                # intervals from the rows' own times: two steps may land within one poll
                emitted = self.ctx.steps_emitted
                times = self.ctx.step_times[:emitted][-(emitted - last_step + (1 if stepped else 0)) :]
                self.intervals.extend(b - a for a, b in zip(times, times[1:]))
                last_step, last_at, stepped = emitted, times[-1], True
                continue
            bound = self.bound(stepped)
            if now - last_at > bound:
                self._fire(now - last_at, bound, stepped)
                return

    def _fire(self, waited: float, bound: float, stepped: bool) -> None:
        from rlbridge.diagnosis import stacks
        from rlbridge.diagnosis.causes import RETRYABLE, role_of
        from rlbridge.diagnosis.hints import hint

        procs = stacks.capture(os.getpid())
        # what the run started under this process (reward workers...), for stop_captured; not the plot helper
        self.captured = [p["pid"] for p in procs if p["pid"] != os.getpid() and p["role"] != "rlbridge plot helper"]
        culprit = stacks.stuck(procs)
        path = stacks.write(self.run_dir, procs, culprit, f"hang-{self.attempt + 1}")
        how = (
            f"training.hang_factor {self.factor:g} x the longest step interval so far ({max(self.intervals):.1f} s), "
            f"at least training.hang_min_s {self.min_s:g}"
            if stepped and self.intervals
            else f"training.hang_first_step_s {self.first_step_s:g} for the first step"
        )
        after = f"step {self.ctx.steps_done}" if self.ctx.steps_done else "the start"
        culprit = culprit or {"process": "unknown", "role": "unknown", "frame": "(no stacks)"}
        if culprit["role"].startswith("Ray actor"):  # which of the run's roles it plays (policy, rollout...)
            culprit["role"] = role_of(culprit["process"], self.actor_roles)
        evidence = (
            f"no step for {waited:.0f} s after {after} (bound {bound:.0f} s: {how}); "
            f"{culprit['process']} is in {culprit['frame']}"
            + (" and is stopped (SIGSTOP)" if culprit.get("stopped") else "")
        )
        self.fired = {
            "kind": "hang",
            "process": culprit["process"],
            "role": culprit["role"],
            "frame": culprit["frame"],
            "evidence": evidence,
            "hint": hint("hang", self.ctx.config, evidence=evidence),
            "retryable": RETRYABLE["hang"],
            "stacks": str(path),
            "bound_s": round(bound, 1),
            "waited_s": round(waited, 1),
            "after_step": self.ctx.steps_done,
        }
        self.ctx.warn(f"hang: {evidence}; stacks in {path}")
        if self.stop_engine is not None:
            self.stop_engine()
        else:
            signal.pthread_kill(self._main, signal.SIGINT)  # the runner turns it into the hang failure

    def stop_captured(self) -> None:
        """After a hang of an engine in this process: SIGKILL the processes it had started (a reward
        worker stuck in a call would otherwise outlive the run)."""
        for pid in getattr(self, "captured", []):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self) -> "HangWatchdog":
        self._ignored_sigint = False
        if self.first_step_s is not None:
            if self.stop_engine is None and threading.current_thread() is threading.main_thread():
                # a background job of a non-interactive shell (`cmd &` in a script) starts with SIGINT
                # ignored, and the watchdog's SIGINT would then never stop the engine: let it through
                # once the watchdog has fired, and keep ignoring any other SIGINT, as the run was told to
                if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
                    signal.signal(signal.SIGINT, self._interrupt_when_fired)
                    self._ignored_sigint = True
            self.start()
        return self

    def _interrupt_when_fired(self, signum, frame) -> None:
        if self.fired is not None:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self._ignored_sigint and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.done.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=60)  # a capture under way finishes before the runner reads `fired`
