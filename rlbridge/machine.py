"""Facts about this machine that every layer needs: where rlbridge caches things, visible GPUs.

A leaf module: it imports nothing from rlbridge (and no torch), so any layer may use it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def cache_dir() -> Path:
    """Where rlbridge keeps built models and engine environments (RLBRIDGE_CACHE_DIR overrides)."""
    return Path(os.environ.get("RLBRIDGE_CACHE_DIR") or Path.home() / ".cache" / "rlbridge").expanduser()


def count_gpus() -> int:
    """Visible NVIDIA GPUs, without importing torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return min(n, len(visible.split(","))) if visible else n


def has_cuda() -> bool:
    return count_gpus() > 0
