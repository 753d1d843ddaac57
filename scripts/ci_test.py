#!/usr/bin/env python3
"""`make test`: the whole suite in phases, overlapped where they can be, each one timed.

    install       the project's venv (`make install`), Chromium for the report's browser test and a
                  local Slurm for the launcher's tests (`make browser slurm`)
    envs          the CI cells' engine environments, created in the background (ENV_STREAMS at once,
                  one shared pip cache) while the suite that needs none runs
    pytest        tests/ except the tests that run an engine in its environment and the matrix_only ones
    pytest-envs   the tests marked `engine_env` (an engine trained in its environment from this venv),
                  started once their environments exist, so none of them skips for want of one
    cell ENGINE   each CI cell's conformance tests inside its environment (`rlbridge compat run`:
                  translate, then the e2e runs CI keeps, RLBRIDGE_CI_CELLS=1)

The CI cells are matrix.yaml's cells with a `ci` field (rlbridge.envs.compat.ci_cells: the peak memory of
the cell's runs and its warm seconds); CI_CELLS="engine==version ..." picks others. Test jobs run TEST_JOBS
at once (default 2) when their memory peaks fit in MEM_BUDGET_GIB (an engine run peaks at 5-10 GiB on a
24 GiB machine); the others wait, and a free slot goes to the longest job that is ready (by warm seconds:
the pytest phase beside the longest cell, then the next, the short ones last). On a machine
shared with other engine runs, RLBRIDGE_CI_ENGINE_LOCK names a lock file every job that starts an engine
holds (flock, as those other runs do). Every phase prints when it starts and ends,
the end prints the table of phases and the totals, and runs/ci/times.json keeps them. The exit status
is non-zero when any phase failed; the last line is `N passed, N failed, N skipped` over every pytest
run, the engine cells included.

Stdlib only: it runs before the venv exists. Knobs (environment): RLBRIDGE_CI_ENV_STREAMS (2),
RLBRIDGE_CI_TEST_JOBS (2), RLBRIDGE_CI_MEM_GIB (the machine's memory less 4 GiB), CI_CELLS (matrix.yaml's
CI cells; `none` for no cell), RLBRIDGE_CI_PYTEST_ARGS (added to both pytest phases),
RLBRIDGE_CI_ENGINE_LOCK (unset).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("VENV", REPO / ".venv"))
BIN = VENV / "bin"
LOGS = REPO / "runs" / "ci"

# The two pytest phases' peak memory (GiB) and warm seconds (serial, measured at d83c156: the pytest phase
# 579 s, the engine_env tests 94 s); the cells' come from matrix.yaml. A cell matrix.yaml gives no `ci`
# (CI_CELLS set by hand) counts as 6 GiB and 0 s.
PYTEST = {"peak_gib": 4, "warm_s": 579}
PYTEST_ENVS = {"peak_gib": 10, "warm_s": 94}

T0 = time.time()
_print_lock = threading.Lock()


def say(msg: str) -> None:
    with _print_lock:
        print(f"[ci {time.time() - T0:7.0f} s] {msg}", flush=True)


@dataclass
class Phase:
    name: str
    started: float | None = None
    ended: float | None = None
    ok: bool | None = None
    detail: str = ""
    counts: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return (self.ended or time.time()) - (self.started or time.time())


PHASES: list[Phase] = []


def run_phase(name: str, cmd: list[str], log: Path, env: dict | None = None, junit: Path | None = None) -> Phase:
    phase = Phase(name)
    PHASES.append(phase)
    phase.started = time.time()
    say(f"start {name}: {' '.join(cmd)} (log {log.relative_to(REPO)})")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    phase.ended = time.time()
    # pytest's 5 (no test selected) is a failure, except in a run narrowed by RLBRIDGE_CI_PYTEST_ARGS
    phase.ok = proc.returncode == 0 or (
        proc.returncode == 5 and junit is not None and bool(os.environ.get("RLBRIDGE_CI_PYTEST_ARGS"))
    )
    if junit is not None and junit.exists():
        phase.counts = junit_counts(junit)
    tail = log.read_text(errors="replace").splitlines()
    phase.detail = next((line for line in reversed(tail) if line.strip()), "")[:160]
    say(
        f"end {name}: {'ok' if phase.ok else f'FAILED (exit {proc.returncode})'} in {phase.seconds:.0f} s: "
        f"{phase.detail}"
    )
    if not phase.ok:
        with _print_lock:
            print(f"---- last lines of {log.relative_to(REPO)} ----", *tail[-60:], "----", sep="\n", flush=True)
    return phase


def junit_counts(path: Path) -> dict:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    # why each skipped test skipped, counted by reason: a skip must be one the run could not avoid
    reasons: dict[str, int] = {}
    for case in root.iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None:
            why = (skipped.get("message") or "").splitlines()[0][:140]
            reasons[why] = reasons.get(why, 0) + 1
    total["skip_reasons"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return total


def cell_counts(engine: str, version: str) -> dict:
    """Sum of the pytest reports the cell's `compat run` wrote in its environment."""
    results = REPO / "runs" / "ci-compat" / "results.json"
    total = {"passed": 0, "failures": 0, "errors": 0, "skipped": 0}
    if not results.exists():
        return total
    for key, outcome in json.loads(results.read_text()).items():
        if key.startswith(f"{engine}|{version}|") and outcome.get("started", "") >= START_STAMP:
            for k in ("failures", "errors", "skipped"):
                total[k] += int(outcome.get(k, 0))
            total["passed"] += int(outcome.get("tests", 0)) - sum(
                int(outcome.get(k, 0)) for k in ("failures", "errors", "skipped")
            )
    return total


START_STAMP = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0))


class Envs:
    """The engine environments, created in ENV_STREAMS background threads; test jobs wait on them."""

    def __init__(self, cells: list[str], streams: int):
        self.ready: dict[str, threading.Event] = {c: threading.Event() for c in cells}
        self.ok: dict[str, bool] = {}
        self.phases: dict[str, Phase] = {}
        queues = [cells[i::streams] for i in range(streams)]
        self.threads = [threading.Thread(target=self._stream, args=(q,), daemon=True) for q in queues if q]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _stream(self, cells: list[str]) -> None:
        for cell in cells:
            phase = run_phase(f"env {cell}", [str(BIN / "rlbridge"), "env", "create", cell], LOGS / f"env-{cell}.log")
            self.ok[cell] = bool(phase.ok)
            self.ready[cell].set()

    def wait(self, cells) -> bool:
        for cell in cells:
            self.ready[cell].wait()
        return all(self.ok.get(c) for c in cells)


def main() -> int:
    streams = int(os.environ.get("RLBRIDGE_CI_ENV_STREAMS", "2"))
    # Two test jobs at once: a cold run took 25.7 min with two against about 36 with one. Two Ray start-ups
    # at once once lost a dashboard port chosen by bind(0) (tests now take theirs from rlbridge.helpers.free_port,
    # outside the kernel's ephemeral range) and a GCS that started in more than Ray's 30 s on a loaded machine
    # (the wait below).
    test_jobs = int(os.environ.get("RLBRIDGE_CI_TEST_JOBS", "2"))
    # Ray 2.60 waits RAY_gcs_server_port_wait_time_s (30) for its GCS to write its port; two engine runs
    # starting at once on 2 cores took longer (verl's gsm8k run: "Timed out waiting for file gcs_server_port")
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
    engine_lock = os.environ.get("RLBRIDGE_CI_ENGINE_LOCK")
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    mem_budget = float(os.environ.get("RLBRIDGE_CI_MEM_GIB") or max(mem_total - 4, 4))
    LOGS.mkdir(parents=True, exist_ok=True)
    say(
        f"make test: {streams} environment streams, {test_jobs} test jobs at once "
        f"within {mem_budget:.0f} GiB; logs in {LOGS.relative_to(REPO)}/"
    )

    install = run_phase(
        "install", ["make", "--no-print-directory", "install", "browser", "slurm"], LOGS / "install.log"
    )
    if not install.ok:
        return finish()
    declared = {
        c["cell"]: c
        for c in json.loads(
            subprocess.run(
                [
                    str(BIN / "python"),
                    "-c",
                    "import json; from rlbridge.envs.compat import ci_cells; print(json.dumps(ci_cells()))",
                ],
                cwd=REPO,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
    }
    chosen = os.environ.get("CI_CELLS", "").split() or list(declared)
    cells = [c for c in chosen if c != "none"]
    info = {c: declared.get(c, {"peak_gib": 6, "warm_s": 0}) for c in cells}
    say(f"cells {' '.join(cells) or 'none'}")

    # Environments start now, beside the suite that needs none. Big ones first in each stream: the
    # first cells' tests can then start while the rest is still installing.
    envs = Envs(sorted(cells, key=lambda c: -info[c]["warm_s"]), streams)
    envs.start()

    # A slot is free when fewer than test_jobs run and the job's memory peak fits; of the jobs that are
    # ready (their environments exist), the longest (warm seconds) takes it.
    # (Ready is read from the environments' events, not from which thread got here first: a cell and
    # pytest-envs wake on the same environment, and the longer must win.)
    sched = threading.Condition()
    running: list[float] = []  # the memory peaks of the jobs that run
    pending: dict[str, list[str]] = {}  # the jobs not started yet, with the environments they need

    expected: dict[str, float] = {}  # job name -> warm seconds
    peaks: dict[str, float] = {}  # job name -> memory peak, GiB

    def rank(name: str) -> float:
        return -expected[name]

    def fits(name: str) -> bool:
        return not running or (len(running) < test_jobs and sum(running) + peaks[name] <= mem_budget)

    def may_start(name: str, mem: float) -> bool:
        # the longest ready job that fits: one whose peak does not fit beside the running job waits without
        # holding up a shorter one that does (a cold run's pytest-envs, 10 GiB beside the verl cell, kept a
        # 5 GiB cell waiting 107 s)
        ready = [n for n, needs in pending.items() if all(envs.ready[c].is_set() for c in needs) and fits(n)]
        return name in ready and rank(name) == min(rank(n) for n in ready)

    def job(
        name: str,
        needs: list[str],
        cost: dict,
        cmd: list[str],
        junit: Path | None,
        env: dict | None = None,
        counts=None,
        engine: bool = True,
    ) -> threading.Thread:
        mem = peaks[name] = cost["peak_gib"]
        expected[name] = cost["warm_s"]

        def body():
            if needs and not envs.wait(needs):
                phase = Phase(
                    name,
                    started=time.time(),
                    ended=time.time(),
                    ok=False,
                    detail=f"environment {', '.join(c for c in needs if not envs.ok.get(c))} failed",
                )
                PHASES.append(phase)
                say(f"skip {name}: {phase.detail}")
                with sched:
                    del pending[name]
                    sched.notify_all()
                return
            with sched:
                sched.wait_for(lambda: may_start(name, mem))
                del pending[name]
                running.append(mem)
                sched.notify_all()
            try:
                with _engine_lock(engine_lock if engine else None, name):
                    phase = run_phase(name, cmd, LOGS / f"{name.replace(' ', '-')}.log", env=env, junit=junit)
                if counts is not None:
                    phase.counts = counts()
            finally:
                with sched:
                    running.remove(mem)
                    sched.notify_all()

        with sched:
            pending[name] = needs
        return threading.Thread(target=body, name=name)

    pytest = [
        str(BIN / "python"),
        "-m",
        "pytest",
        "-q",
        "-ra",
        "-p",
        "no:cacheprovider",
        "--durations=25",
        *os.environ.get("RLBRIDGE_CI_PYTEST_ARGS", "").split(),
    ]  # e.g. -x, or -k to try the script
    threads = [
        job(
            "pytest",
            [],
            PYTEST,
            [*pytest, "-m", "not engine_env and not matrix_only", f"--junitxml={LOGS / 'pytest.xml'}"],
            LOGS / "pytest.xml",
            engine=False,
        ),
        # the engine_env tests train in (or read) CI cells' environments: they start once all exist
        job(
            "pytest-envs",
            cells,
            PYTEST_ENVS,
            [*pytest, "-m", "engine_env and not matrix_only", f"--junitxml={LOGS / 'pytest-envs.xml'}"],
            LOGS / "pytest-envs.xml",
        ),
    ]
    for cell in cells:
        engine, _, version = cell.partition("==")
        threads.append(
            job(
                f"cell {cell}",
                [cell],
                info[cell],
                [str(BIN / "rlbridge"), "compat", "run", "--engine", engine, "--version", version],
                None,
                env={"RLBRIDGE_CI_CELLS": "1", "RLBRIDGE_COMPAT_RESULTS": str(REPO / "runs" / "ci-compat")},
                counts=lambda e=engine, v=version: cell_counts(e, v),
            )
        )
    for t in threads:  # all are pending before any starts, so the first free slot goes to the longest
        t.start()
    for t in threads:
        t.join()
    return finish()


class _engine_lock:
    """flock on `path` while a job runs engines (None: no lock), so that on a machine shared with other
    engine runs only one runs at a time; a wait for it is printed."""

    def __init__(self, path: str | None, name: str):
        self.path, self.name, self.fh = path, name, None

    def __enter__(self):
        if self.path:
            self.fh = open(self.path, "a")
            try:
                fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"{self.name}: waiting for the engine lock {self.path}")
                fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fh is not None:
            self.fh.close()  # closing releases the lock


def finish() -> int:
    wall = time.time() - T0
    rows = sorted(PHASES, key=lambda p: p.started or 0)
    with _print_lock:
        print("\n== make test: phases (wall-clock; phases overlap) ==")
        print(f"{'phase':28} {'start s':>8} {'end s':>8} {'seconds':>8}  result")
        for p in rows:
            c = p.counts
            counted = (
                f"  {c.get('passed', 0)} passed, {c.get('failures', 0) + c.get('errors', 0)} failed, "
                f"{c.get('skipped', 0)} skipped"
                if c
                else ""
            )
            print(
                f"{p.name:28} {(p.started or T0) - T0:8.0f} {(p.ended or T0) - T0:8.0f} {p.seconds:8.0f}  "
                f"{'ok' if p.ok else 'FAILED'}{counted}"
            )
        print(f"{'total':28} {'':8} {'':8} {wall:8.0f}  ({wall / 60:.1f} min)")
        for p in rows:
            for why, n in p.counts.get("skip_reasons", {}).items():
                print(f"skipped in {p.name}: {n} x {why}")
    (LOGS / "times.json").write_text(
        json.dumps(
            {
                "total_s": round(wall, 1),
                "started": START_STAMP,
                "phases": [
                    {
                        "name": p.name,
                        "start_s": round((p.started or T0) - T0, 1),
                        "seconds": round(p.seconds, 1),
                        "ok": p.ok,
                        **p.counts,
                    }
                    for p in rows
                ],
            },
            indent=2,
        )
        + "\n"
    )
    passed = sum(p.counts.get("passed", 0) for p in rows)
    failed = sum(p.counts.get("failures", 0) + p.counts.get("errors", 0) for p in rows)
    skipped = sum(p.counts.get("skipped", 0) for p in rows)
    bad = [p.name for p in rows if not p.ok]
    if bad:
        print(f"failed phases: {', '.join(bad)}")
        failed = max(failed, 1)
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
