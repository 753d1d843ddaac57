"""The engine process tree dies with the rlbridge process that launched it, and the run directory
says that the run was killed (rlbridge.engine.lifeline, rlbridge.diagnosis.runstate)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rlbridge.engine.lifeline import LIFELINE_FD_ENV, descendants
from rlbridge.errors import RLBridgeError
from rlbridge.diagnosis import runstate


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def _wait_dead(pids, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


# The "engine": installs the lifeline, then starts a child and an orphaned grandchild (double fork,
# so that its parent is gone and only the subreaper can still find it), and waits.
ENGINE = textwrap.dedent("""
    import os, subprocess, sys, time
    from rlbridge.engine import lifeline
    lifeline.install(sys.argv[1], grace_s=1.0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    middle = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print(p.pid)"],
        stdout=subprocess.PIPE, text=True)
    orphan = int(middle.stdout.readline())
    middle.wait()
    print(os.getpid(), child.pid, orphan, flush=True)
    time.sleep(600)
""")

# The "user's rlbridge process": holds the lifeline's write end, as rlbridge.run.launch does.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], pass_fds=(r,),
                            env={**os.environ, %r: str(r)}, start_new_session=True)
    os.close(r)
    time.sleep(600)
"""
    % LIFELINE_FD_ENV
)


def test_sigkill_of_the_parent_stops_the_engine_tree_within_seconds(tmp_path):
    runstate.start(tmp_path)  # what `rlbridge train` writes before it starts the engine
    parent = subprocess.Popen([sys.executable, "-c", PARENT, ENGINE, str(tmp_path)])
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(descendants(parent.pid)) < 3:
            time.sleep(0.2)  # engine, its child, and the orphan re-parented to it
        time.sleep(0.5)
        engine = descendants(parent.pid)[0]
        everything = [engine, *descendants(engine)]
        assert len(everything) >= 3, everything
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        started = time.time()
        left = _wait_dead(everything, 10)
        assert not left, f"still running after the parent's SIGKILL: {left}"
        assert time.time() - started < 8
    finally:
        for pid in [parent.pid, *descendants(parent.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    state = json.loads((tmp_path / "run_state.json").read_text())
    assert state["status"] == "killed" and "died" in state["reason"]
    previous = runstate.previous_run(tmp_path)
    assert previous["status"] == "killed"


def test_orphans_of_the_engine_are_stopped_too(tmp_path):
    """The double-forked grandchild has no parent left but the subreaper: it must go as well."""
    out = tmp_path / "pids"
    engine = subprocess.Popen(
        [sys.executable, "-c", ENGINE, str(tmp_path)],
        stdout=open(out, "w"),
        env={**os.environ},
        start_new_session=True,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not out.read_text().strip():
            time.sleep(0.2)
        engine_pid, child, orphan = map(int, out.read_text().split())
        assert engine_pid == engine.pid
        # no lifeline fd: the watchdog falls back to the parent pid; here the parent (pytest) lives on,
        # so stop the tree the way the engine does at its end
        from rlbridge.engine.lifeline import kill_descendants

        assert orphan in descendants(engine.pid), "the orphan was re-parented to the subreaper engine"
        signalled = kill_descendants(grace_s=1.0, pid=engine.pid)
        assert {child, orphan} <= set(signalled)
        assert not _wait_dead([child, orphan], 5)
    finally:
        engine.kill()
        engine.wait()


def test_a_live_run_in_the_directory_is_refused_and_a_dead_one_is_reported_killed(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        runstate.write_state(tmp_path, status="running", pid=sleeper.pid, host=os.uname().nodename, started=time.time())
        with pytest.raises(RLBridgeError, match="output_dir: another rlbridge run"):
            runstate.previous_run(tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')  # a torn last line
    previous = runstate.previous_run(tmp_path)
    assert previous["status"] == "killed" and previous["pid"] == sleeper.pid and previous["last_step"] == 2
    runstate.write_state(tmp_path, status="completed", pid=sleeper.pid)
    assert runstate.previous_run(tmp_path) is None
