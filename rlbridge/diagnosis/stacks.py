"""The Python stacks of every process of a run, each with its role, and the one that is stuck.

Stacks come from py-spy (`py-spy dump --json --nonblocking`): it reads a process's interpreter state
from outside, so it works on processes rlbridge did not start and cannot ask (Ray workers, vLLM's
engine core), on one blocked in C (a collective, a socket read) or holding the GIL in a loop, and on a
stopped one, without pausing any of them (--nonblocking). faulthandler or a signal handler would need
every process to have installed it first and a main thread able to run it, which a hung one may not
have. The tree is the run's own: every descendant of its root process (the engine process is a
child subreaper, so Ray's workers and vLLM's engines stay inside it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# leaf functions a thread waits in (the stdlib's and the engines' waiting primitives)
_WAITS = {
    "wait",
    "_wait_for_tstate_lock",
    "acquire",
    "get",
    "select",
    "poll",
    "recv",
    "recv_into",
    "_recv",
    "_recv_bytes",
    "recv_bytes",
    "read",
    "readline",
    "readinto",
    "sleep",
    "accept",
    "join",
    "result",
    "wait_for",
    "_poll",
    "epoll",
    "_worker",
    "_run_once",
    "run_forever",
    "get_objects",
    "serve_forever",
    "_handle_workers",
    "_wait_for_updates",
    "main_loop",
}  # the last: a Ray worker waiting for its next task (ray/_private/worker.py)
_WAITING = re.compile(r"poll|wait|recv|select|sleep|accept", re.IGNORECASE)
_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python3\.\d+/|<frozen )")


# the watchdog's own threads, left out of a stack capture
_OWN_MODULES = ("rlbridge/diagnosis/stacks.py", "rlbridge/diagnosis/watchdog.py")


def py_spy() -> str | None:
    """The py-spy executable: beside this Python (its wheel's script) or on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def tree(root: int) -> list[dict[str, Any]]:
    """The root process and its descendants: pid, ppid, state (R, S, T for stopped...), cmdline, exe."""
    parents: dict[int, int] = {}
    info: dict[int, dict[str, Any]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            rest = stat[stat.rfind(b")") + 2 :].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                exe = ""
        except OSError:
            continue
        parents[pid] = int(rest[1])
        info[pid] = {"pid": pid, "ppid": int(rest[1]), "state": rest[0].decode(), "cmdline": cmdline[:400], "exe": exe}
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        if pid in info:
            out.append(info[pid])
            todo.extend(sorted(p for p, pp in parents.items() if pp == pid))
    return out


def is_python(proc: dict[str, Any]) -> bool:
    return (
        "python" in Path(proc["exe"]).name
        or proc["cmdline"].split(" ")[0].endswith(("python", "python3"))
        or proc["cmdline"].startswith(("ray::", "VLLM::"))
    )


def dump(pid: int, timeout_s: float = 20.0) -> tuple[list[dict[str, Any]], str | None]:
    """The threads of one Python process with their frames (innermost first), or why there are none."""
    exe = py_spy()
    if exe is None:
        return [], "py-spy is not installed (pip install 'rlbridge[stacks]')"
    last = ""
    for _ in range(2):  # --nonblocking may read a state that changes under it: once more
        try:
            res = subprocess.run(
                [exe, "dump", "--json", "--nonblocking", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return [], f"py-spy took over {timeout_s:.0f} s"
        if res.returncode == 0:
            try:
                threads = json.loads(res.stdout)
            except ValueError:
                last = res.stdout[-300:]
                continue
            return [
                {
                    "name": t.get("thread_name") or str(t.get("thread_id")),
                    "os_thread_id": t.get("os_thread_id"),
                    "active": bool(t.get("active")),
                    "frames": [
                        {"name": f["name"], "file": f["filename"], "line": f["line"]} for f in t.get("frames", [])
                    ],
                }
                for t in threads
            ], None
        last = (res.stderr or res.stdout).strip()[-300:]
    return [], last or "py-spy failed"


def _engine_packages() -> tuple[str, ...]:
    from rlbridge.contract.registry import get_plugin_manager

    return get_plugin_manager().engine_packages()


def role(proc: dict[str, Any], threads: list[dict[str, Any]], root: int) -> str:
    """trainer (the engine process), Ray actor <class>, vLLM engine, reward worker, Ray's own processes,
    or rlbridge (the user's process)."""
    cmd = proc["cmdline"]
    files = " ".join(f["file"] for t in threads for f in t["frames"])
    if proc["pid"] == root:
        in_process = "rlbridge/engine" in files or any(f"/{pkg}/" in files for pkg in _engine_packages())
        return "rlbridge train (trainer, engine in process)" if in_process else "rlbridge train"
    if "rlbridge.engine.child" in cmd:
        return "trainer (engine process)"
    if "rlbridge.run.summary" in cmd:
        return "rlbridge plot helper"
    if cmd.startswith("VLLM::") or "EngineCore" in cmd or "vllm/v1/engine/core.py" in files:
        return "vLLM engine"
    if cmd.startswith("ray::"):
        name = cmd.split()[0][len("ray::") :]
        if name.startswith("IDLE"):
            return "Ray worker (idle)"
        cls = name.split(".")[0]
        if "LLMRayActor" in cls or "vLLM" in cls:
            return f"vLLM engine (Ray actor {cls})"
        return f"Ray actor {name}"
    if "multiprocessing" in cmd and ("pebble/" in files or "rlbridge/engine/workers.py" in files):
        return "reward worker"  # rollout_workers' pool (pebble, spawned)
    if (
        "ray/_private/workers" in cmd
        or "dashboard" in cmd
        or "log_monitor" in cmd
        or "ray/autoscaler" in cmd
        or "ray/core/src/ray/" in cmd
    ):  # the last: Ray's GCS server and raylet binaries
        return "Ray service"
    if "multiprocessing" in cmd:
        return "worker process"
    return "process"


def capture(root: int, exclude: set[int] | frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """Every process of the tree under `root` with its role and, for Python ones, its threads' stacks."""
    procs = [p for p in tree(root) if p["pid"] not in exclude and p["pid"] != os.getpid() or p["pid"] == root]
    pythons = [p for p in procs if is_python(p)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        dumps = dict(zip([p["pid"] for p in pythons], pool.map(lambda p: dump(p["pid"]), pythons)))
    for p in procs:
        threads, error = dumps.get(p["pid"], ([], None if is_python(p) else "not a Python process"))
        # the capture's own threads (the watchdog, py-spy's callers) are not the run's
        threads = [t for t in threads if not any(f["file"].endswith(_OWN_MODULES) for f in t["frames"])]
        p["threads"] = threads
        if error:
            p["error"] = error
        p["role"] = role(p, threads, root)
    return procs


def frame_text(frame: dict[str, Any]) -> str:
    return f"{frame['name']} ({frame['file']}:{frame['line']})"


def _thread_score(thread: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """How much a thread looks like the one the run waits on, and its telling frame: the innermost frame
    outside the stdlib and installed libraries (plugin or user code), else its innermost frame."""
    frames = thread["frames"]
    if not frames:
        return -1, None
    # a `python -c` bootstrap (<string>) is nobody's code
    own = next((f for f in frames if not _LIBRARY.search(f["file"]) and not f["file"].startswith("<")), None)
    leaf = frames[0]
    score = 0
    name = leaf["name"].split(".")[-1]
    waiting = name in _WAITS or bool(_WAITING.search(name))
    # py-spy calls a thread active when it is not in a known idle syscall: a Ray worker's main loop (C++
    # waiting for tasks) reads as active, so activity counts only outside a waiting primitive
    if thread["active"] and not waiting:
        score += 4
    if not waiting:
        score += 2
    if own is not None and "rlbridge/" not in own["file"]:
        # a plugin's or the user's code, not the engines' or rlbridge's plumbing: above any busy engine
        # thread (verl 0.9.1's vLLMHttpServer main loop outranked a stalled reward worker before)
        score += 8
    return score, own or leaf


_ROLE_RANK = {"reward worker": 3, "vLLM engine": 2, "Ray actor": 2, "trainer": 1, "rlbridge train (trainer": 1}


def stuck(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The process the run most likely waits on, with the frame it waits in: a stopped process first
    (SIGSTOP: state T), else the one whose thread is busy or in plugin code, by role (a reward worker
    before the vLLM engine, a Ray actor, then the trainer)."""
    best: tuple[int, ...] | None = None
    chosen = None
    for p in procs:
        if p["role"].startswith(("Ray service", "Ray worker (idle)", "rlbridge plot helper")) or (
            p["role"] == "rlbridge train" and len(procs) > 1
        ):
            continue
        rank = next((v for k, v in _ROLE_RANK.items() if p["role"].startswith(k)), 0)
        stopped = 1 if p["state"] in ("T", "t") else 0
        for t in p["threads"] or [{"frames": [], "active": False, "name": "?"}]:
            score, frame = _thread_score(t)
            # every thread of a stopped process is stopped: its main thread's frame says where it is
            # (a sync Ray actor's method, a rank's collective), not a helper thread's
            key = (stopped, int(stopped and t.get("name") == "MainThread"), score, rank)
            if best is None or key > best:
                best, chosen = key, (p, t, frame)
    if chosen is None:
        return None
    p, t, frame = chosen
    return {
        "pid": p["pid"],
        "process": f"{p['role']} (pid {p['pid']})",
        "role": p["role"],
        "state": p["state"],
        "thread": t.get("name"),
        "frame": frame_text(frame) if frame else "(no Python frames)",
        "stopped": p["state"] in ("T", "t"),
    }


def render(procs: list[dict[str, Any]], culprit: dict[str, Any] | None = None) -> str:
    """The stacks as text: one block per process (role, pid, state, command), each thread innermost first."""
    out = [f"stacks of {len(procs)} process(es), {time.strftime('%Y-%m-%d %H:%M:%S')}"]
    if culprit:
        out.append(
            f"stuck: {culprit['process']}, thread {culprit['thread']}, in {culprit['frame']}"
            + (" (stopped: SIGSTOP)" if culprit.get("stopped") else "")
        )
    for p in procs:
        out.append("")
        out.append(f"== {p['role']}: pid {p['pid']} (parent {p['ppid']}, state {p['state']}): {p['cmdline'][:200]}")
        if p.get("error"):
            out.append(f"   ({p['error']})")
        for t in p.get("threads", []):
            out.append(f"   thread {t['name']} ({'active' if t['active'] else 'idle'})")
            out.extend(f"      {frame_text(f)}" for f in t["frames"])
    return "\n".join(out) + "\n"


def write(run_dir: Path, procs: list[dict[str, Any]], culprit: dict[str, Any] | None, name: str) -> Path:
    """stacks/<name>.txt (for people) and stacks/<name>.json (for tools) in the run directory."""
    target = Path(run_dir) / "stacks"
    target.mkdir(parents=True, exist_ok=True)
    (target / f"{name}.json").write_text(json.dumps({"stuck": culprit, "processes": procs}, indent=1) + "\n")
    path = target / f"{name}.txt"
    path.write_text(render(procs, culprit))
    return path


def of_run(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """`rlbridge stacks RUN_DIR`: the stacks of the live run writing there (its run_state.json names
    the process)."""
    from rlbridge.errors import RLBridgeError
    from rlbridge.diagnosis import runstate

    state = runstate.read_state(Path(run_dir))
    pid = state.get("pid") if state else None
    if not state or state.get("status") != "running" or not isinstance(pid, int) or not runstate.pid_alive(pid):
        status = state.get("status") if state else "no run_state.json"
        raise RLBridgeError(
            f"RUN_DIR: no live run writes to {run_dir} ({status}); `rlbridge doctor {run_dir}` explains how it ended"
        )
    procs = capture(pid)
    return procs, stuck(procs)
