"""OpenEnv (openenv-core) environments as an rlbridge environment plugin: an optional extra
(`pip install 'rlbridge[openenv]'`, in the engine's environment too), registered through the
`rlbridge` entry-point group like a third-party package.

    environment:
      name: openenv
      args: {server: path/to/env_server.py:app, action_field: message, observation_field: text}
      max_turns: 2

- The run starts the environment's server itself, as a local process of the run (uvicorn serving
  the ASGI app `server` names: FILE.py:APP or package.module:APP; no container), when the run starts
  (`rlbridge_run_start`, in the user's process), waits for its /health, and stops it when the run
  ends or fails. Its address reaches every engine process in RLBRIDGE_OPENENV_URL. `url:` instead of
  `server:` uses a server you run yourself.
- Each episode is one session of OpenEnv's client (GenericEnvClient over the server's WebSocket: the
  HTTP /reset and /step endpoints build a fresh environment per request, so episodes need sessions):
  `reset(**row columns)`, then `step({action_field: the policy's turn})` per turn; the observation's
  reward and done are the turn's, its `observation_field` the feedback text. The server must allow as
  many concurrent sessions as the engine runs episodes at once (create_app(max_concurrent_envs=...)).
- Not mapped yet: an OpenEnv environment's MCP tools (they would become the environment's tools).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rlbridge import hookimpl
from rlbridge.contract.environments import Environment, StepResult
from rlbridge.contract.registry import EnvironmentPlugin
from rlbridge.errors import ConfigError
from rlbridge.helpers import free_port

URL_ENV = "RLBRIDGE_OPENENV_URL"
_server: subprocess.Popen | None = None


class OpenEnvEnvironment(Environment):
    """One episode = one session of an OpenEnv server."""

    def __init__(
        self,
        server: str | None = None,
        url: str | None = None,
        action_field: str = "message",
        observation_field: str = "text",
        reset_columns: list[str] | None = None,
        observation_as_prompt: bool = False,
    ) -> None:
        self.url = url or os.environ.get(URL_ENV)
        if not self.url:
            raise ConfigError(
                "environment.args: openenv needs `server` (rlbridge starts it) or `url` (a server you run)"
            )
        self.action_field, self.observation_field = action_field, observation_field
        self.reset_columns, self.observation_as_prompt = reset_columns, observation_as_prompt
        self.client = None

    def reset(self, row: dict[str, Any], prompt: str) -> str:
        from openenv.core.generic_client import GenericEnvClient

        self.close()
        self.client = GenericEnvClient(base_url=self.url).sync()
        self.client.connect()
        columns = self.reset_columns if self.reset_columns is not None else list(row)
        kwargs = {k: row[k] for k in columns if k in row and _jsonable(row[k])}
        result = self.client.reset(**kwargs)
        text = str((result.observation or {}).get(self.observation_field, ""))
        return text if self.observation_as_prompt and text else prompt

    def step(self, action: str) -> StepResult:
        result = self.client.step({self.action_field: action})
        feedback = str((result.observation or {}).get(self.observation_field, ""))
        if result.done:
            self.close()
        return StepResult(reward=float(result.reward or 0.0), done=bool(result.done), feedback=feedback)

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None

    def __del__(self) -> None:
        self.close()


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def start_server(server: str, log_path: Path, timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """uvicorn serving `server` (FILE.py:APP or module:APP) on a free local port; waits for /health."""
    target, _, app = server.rpartition(":")
    if not target or not app:
        raise ConfigError(f"environment.args.server: '{server}' must be FILE.py:APP or package.module:APP")
    cmd = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1"]
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"environment.args.server: no file {target}")
        cmd += ["--app-dir", str(path.parent)]
        target = path.stem
    port = free_port()
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), f"{target}:{app}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ENABLE_WEB_INTERFACE": "false"},
        start_new_session=True,
    )
    import urllib.request  # here, not at module level: every command that loads plugins would pay for it

    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise ConfigError(
                f"environment.args.server: the OpenEnv server exited with code {proc.returncode}; see {log_path}"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise ConfigError(
        f"environment.args.server: the OpenEnv server did not answer /health in {timeout_s:.0f} s; see {log_path}"
    )


def stop_server(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@hookimpl
def rlbridge_run_start(config, plan, run_dir):
    global _server
    spec = config.environment
    if spec is None or spec.name != "openenv" or not spec.args.get("server"):
        return
    _server, url = start_server(spec.args["server"], Path(run_dir) / "openenv_server.log")
    os.environ[URL_ENV] = url  # the engine processes started after this hook inherit it


@hookimpl
def rlbridge_run_end(summary):
    _stop()


@hookimpl
def rlbridge_run_failed(error, summary):
    _stop()


def _stop() -> None:
    global _server
    stop_server(_server)
    _server = None
    os.environ.pop(URL_ENV, None)


@hookimpl
def rlbridge_register_environments():
    return [
        EnvironmentPlugin(
            "openenv", OpenEnvEnvironment, "an OpenEnv server's environment, one session per episode (extra: openenv)"
        )
    ]
