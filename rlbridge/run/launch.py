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
import sys
import threading
import time
from pathlib import Path

from rlbridge.engine.child import EVENT_FD_ENV
from rlbridge.engine.environments import engine_env_vars, first_error_lines
from rlbridge.engine.lifeline import LIFELINE_FD_ENV
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
    # only what was set: validators that ask whether a field was given then judge the same config
    config = ctx.config.model_dump(mode="json", exclude_unset=True)
    job.write_text(json.dumps({"config": config, "plan": plan.to_dict(), "run_dir": str(ctx.run_dir)}))
    read_fd, write_fd = os.pipe()
    # the lifeline: only this process holds its write end, so the engine sees EOF when we die
    life_read, life_write = os.pipe()
    env = {
        **os.environ,
        **engine_env_vars(python),
        EVENT_FD_ENV: str(write_fd),
        LIFELINE_FD_ENV: str(life_read),
        "PYTHONUNBUFFERED": "1",
    }
    log_path = ctx.run_dir / "engine.log"
    proc = subprocess.Popen(
        [str(python), "-m", "rlbridge.engine.child", str(job)],
        pass_fds=(write_fd, life_read),
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    os.close(write_fd)
    os.close(life_read)
    tee = threading.Thread(target=_tee, args=(proc.stdout, log_path), daemon=True)
    tee.start()
    (ctx.run_dir / "engine.pid").write_text(str(proc.pid))
    ctx.engine_process = proc  # the hang watchdog stops it (rlbridge.run.runner)
    error = failure = engine_traceback = None
    try:
        with os.fdopen(read_fd, "r") as events:
            for line in events:
                event = json.loads(line)
                kind = event["kind"]
                if kind == "step":
                    ctx.emit_step(
                        event["step"],
                        event["metrics"],
                        native=event.get("native"),
                        samples=event.get("samples"),
                        rewards=event.get("rewards"),
                    )
                elif kind == "checkpoint":
                    ctx.checkpoint_saved(event["step"], event["path"])
                elif kind == "eval":
                    ctx.emit_eval(event["step"], event["metrics"])
                elif kind == "started":
                    ctx.engine_version = event.get("engine_version")
                elif kind == "warning":
                    ctx.warn(event["message"])
                elif kind == "error":
                    error, failure, engine_traceback = event["message"], event.get("failure"), event.get("traceback")
        rc = proc.wait()
    except BaseException:
        stop_process_group(proc)
        raise
    finally:
        os.close(life_write)
    if _group_alive(proc.pid):  # anything of the engine's session still running goes too
        stop_process_group(proc, grace_s=3.0)
    tee.join(timeout=10)
    if rc != 0:
        if failure is None:
            how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
            failure = {
                "process": f"engine process (pid {proc.pid}, {python})",
                "how": how,
                "error": first_error_lines(log_path),
                "log": str(log_path),
            }
        failure.setdefault("log", str(log_path))
        where = f"{failure['process']}; log: {failure['log']}"
        message = f"the engine process ({python}) exited with code {rc}" + (f": {error}" if error else "")
        exc = EngineProcessError(f"{message} [{where}]")
        exc.failure = failure
        exc.engine_traceback = engine_traceback  # the engine's own frames: rlbridge.diagnosis.causes reads them
        raise exc


def _tee(stream, path: Path) -> None:
    """Copy the engine's output to the console and to engine.log in the run directory."""
    with open(path, "ab") as log:
        for line in iter(stream.readline, b""):
            log.write(line)
            log.flush()
            try:
                sys.stderr.buffer.write(line)
                sys.stderr.flush()
            except (AttributeError, ValueError, OSError):
                pass
    stream.close()


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
