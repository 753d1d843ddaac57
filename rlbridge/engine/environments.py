"""Where engine environments live on disk, and what every process started from one needs. The engine room
publishes these so that adapters (an importer looking for the engine's own parser, a stage starting the engine's
CLI) find an environment without importing rlbridge.envs, which creates them."""

from __future__ import annotations

import os
from pathlib import Path

from rlbridge.machine import cache_dir


def envs_dir() -> Path:
    return cache_dir() / "envs"


def env_path(engine: str, version: str) -> Path:
    return envs_dir() / f"{engine}-{version}"


def env_python(path: Path) -> Path:
    return path / "bin" / "python"


def is_complete(path: Path) -> bool:
    """`rlbridge env create` finished every stage there (its last stamp, .rlbridge/rlbridge.done)."""
    return (path / ".rlbridge" / "rlbridge.done").exists() and env_python(path).exists()


def last_line_printed(path: Path, code: str, extra_env: dict[str, str] | None = None) -> str | None:
    """The last line `code` prints when the Python of the engine environment at `path` runs it (an importer asking
    the engine's own parser or config for its defaults), with `extra_env` added to this process's variables;
    None when it could not start, ran past two minutes or failed."""
    import subprocess

    try:
        res = subprocess.run(
            [str(env_python(path)), "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **extra_env} if extra_env else None,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip().splitlines()[-1] if res.returncode == 0 else None


def engine_env_vars(python: Path) -> dict[str, str]:
    """Variables for every engine process run from an engine environment (the run's and a native bench
    arm's): PyTorch's JIT-built extensions (DeepSpeed's CPU Adam for OpenRLHF, about a minute to
    compile on 2 cores) are cached in the environment itself. In the shared ~/.cache/torch_extensions,
    environments whose torch or DeepSpeed differ rebuild what the other built: fused_adam there was
    rebuilt 10 times in one day of runs from several environments, each time inside a run's start-up."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return {}
    return {"TORCH_EXTENSIONS_DIR": str(Path(python).parent.parent / "torch_extensions")}


def first_error_lines(log: Path, n: int = 8) -> list[str]:
    """The start of the last traceback in a log (else its last lines): what names the cause."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback") or "Error" in line.split(":")[0]]
    if starts:
        i = starts[-1]
        block = lines[i:]
        if block[0].startswith("Traceback"):  # the exception line ends the traceback: show it first
            last = next((ln for ln in block if ln and not ln.startswith((" ", "Traceback"))), None)
            return ([last] if last else []) + block[: n - 1]
        return block[:n]
    return lines[-n:]
