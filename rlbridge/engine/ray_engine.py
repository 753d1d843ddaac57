"""The kit adapters whose engine runs its work in Ray workers and vLLM engines share: the start-up
hook that installs the adapter's patches and instrumentation in every process of the run (one
boot/sitecustomize.py for all engines, calling the installer RLBRIDGE_BOOT names) and the variables
every such process needs (they inherit them from the driver). The records those processes write are
rlbridge.engine.events; the cluster is rlbridge.engine.ray_cluster."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlbridge.contract.local_plugins import PLUGINS_ENV
from rlbridge.engine.events import EVENTS_ENV, REWARDS_ENV
from rlbridge.engine.patch_report import PATCH_DIR_ENV
from rlbridge.engine.workers import WORKERS_ENV

BOOT_ENV = "RLBRIDGE_BOOT"
BOOT_DIR = Path(__file__).resolve().parent / "boot"


def boot_env(installer: str) -> dict[str, str]:
    """Variables that make every Python process inheriting them call `installer` ("module:function")
    at start-up: RLBRIDGE_BOOT and PYTHONPATH with the boot directory first."""
    return {
        BOOT_ENV: installer,
        "PYTHONPATH": os.pathsep.join(p for p in (str(BOOT_DIR), os.environ.get("PYTHONPATH", "")) if p),
    }


def worker_env(
    ctx, installer: str, events: Path, native_env: str, native_plan: Path, rewards: Any, run_dir: Path
) -> dict[str, str]:
    """What every process of a Ray engine's run gets: the boot, the events file, the adapter's native
    plan (under its own variable `native_env`, which its patches read), the reward specs, the worker
    pool's settings, the config's local plugins, and where applied patches are reported."""
    return {
        **boot_env(installer),
        EVENTS_ENV: str(events),
        native_env: str(native_plan),
        REWARDS_ENV: json.dumps(rewards),
        WORKERS_ENV: ctx.config.rollout_workers.model_dump_json(),
        PLUGINS_ENV: json.dumps(getattr(ctx.config, "plugins", [])),
        # every process that applies patches (driver, Ray workers, vLLM workers) reports there
        PATCH_DIR_ENV: os.environ.get(PATCH_DIR_ENV) or str(Path(run_dir) / "patches"),
    }


def once(install: Callable[[], None]) -> Callable[[], None]:
    """An installer that acts on its first call in a process only (the driver calls it, and so does its
    sitecustomize)."""
    done: list[bool] = []

    @functools.wraps(install)
    def install_once() -> None:
        if not done:
            done.append(True)
            install()

    return install_once
