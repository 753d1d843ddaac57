"""Running a plan in another Python environment (an engine environment) and relaying its events.

The engine process gets its own session (process group), so that Ctrl-C and failures are handled
here: on interruption the whole group gets SIGINT, then SIGTERM, then SIGKILL, and nothing of the
run is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from rlbridge.engine.child import EVENT_FD_ENV
from rlbridge.errors import RLBridgeError


class EngineProcessError(RLBridgeError):
    """The engine process failed; the message carries its error."""


def python_of(env: str | Path) -> Path:
    path = Path(env).expanduser().absolute()
    python = path if path.name.startswith("python") and path.is_file() else path / "bin" / "python"
    if not python.exists():
        raise RLBridgeError(f"engine_env: no Python interpreter at {python}; give a virtual environment directory")
    return python


def run_in_env(python: Path, plan, ctx) -> None:
    job = ctx.run_dir / "job.json"
    job.write_text(json.dumps({"config": ctx.config.model_dump(mode="json"), "plan": plan.to_dict(), "run_dir": str(ctx.run_dir)}))
    read_fd, write_fd = os.pipe()
    env = {**os.environ, EVENT_FD_ENV: str(write_fd), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [str(python), "-m", "rlbridge.engine.child", str(job)], pass_fds=(write_fd,), env=env, start_new_session=True
    )
    os.close(write_fd)
    (ctx.run_dir / "engine.pid").write_text(str(proc.pid))
    error = None
    try:
        with os.fdopen(read_fd, "r") as events:
            for line in events:
                event = json.loads(line)
                kind = event["kind"]
                if kind == "step":
                    ctx.emit_step(event["step"], event["metrics"], native=event.get("native"),
                                  samples=event.get("samples"), rewards=event.get("rewards"))
                elif kind == "checkpoint":
                    ctx.checkpoint_saved(event["step"], event["path"])
                elif kind == "started":
                    ctx.engine_version = event.get("engine_version")
                elif kind == "error":
                    error = event["message"]
        rc = proc.wait()
    except BaseException:
        stop_process_group(proc)
        raise
    if rc != 0:
        raise EngineProcessError(f"the engine process ({python}) exited with code {rc}" + (f": {error}" if error else ""))


def stop_process_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the engine's whole process group, until it is gone."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + wait
        while time.time() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.1)
    proc.wait(timeout=5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
