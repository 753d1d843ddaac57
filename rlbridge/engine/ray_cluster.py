"""The Ray cluster a run of a Ray engine trains on: started for this run only (or joined, with
resources.ray_address), stopped by its own handle, its logs kept and its failure described when the
run fails (rlbridge.engine.ray_failures). Imports Ray only inside ray_cluster()."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlbridge.engine.events import EVENTS_ENV
from rlbridge.engine.ray_failures import describe_ray_failure


@contextmanager
def ray_cluster(
    num_cpus: int,
    env: dict[str, str],
    logical_gpus: int = 0,
    resources: dict | None = None,
    run_dir: Path | None = None,
    address: str | None = None,
) -> Iterator[None]:
    """The Ray cluster a run trains on. By default one of this run only: `address="local"` never
    attaches to a cluster someone else started (engines' own `ray.init()` would), its temp dir is
    private, and it is stopped by its own handle (never the Ray CLI's stop command, which kills every
    Ray process on the machine). On CPU, `logical_gpus` declares the GPUs engines' resource requests
    ask for. With `address` (resources.ray_address) the run joins that existing, possibly multi-node
    cluster instead, and only disconnects from it at the end. If the run fails, Ray's logs are copied to
    `run_dir`/logs/ray and the error gets a `failure`: the process that died, its first error lines
    and its log."""
    import ray

    tmp = Path(tempfile.mkdtemp(prefix="rlb-ray-"))  # short: Ray's socket paths have a length limit
    if address:  # someone else's cluster (resources.ray_address): join it, never start or stop it
        init: dict[str, Any] = {"address": address, "runtime_env": {"env_vars": env}}
        # inside a Ray job (rlbridge submit) the job's runtime env already sets some of these variables:
        # the run's own values win instead of ray.init refusing the overlap
        os.environ.setdefault("RAY_OVERRIDE_JOB_RUNTIME_ENV", "1")
    else:
        # a cluster this process starts inherits its environment: the variables go there, not into a
        # job-wide runtime_env, with which Ray starts every worker through its runtime-env agent instead
        # of from its pool of prestarted ones (measured on verl 0.9.1's quickstart: ~25 s more start-up)
        os.environ.update(env)
        init = {
            "address": "local",
            "num_cpus": num_cpus,
            "_temp_dir": str(tmp),
            "include_dashboard": False,
        }
        if logical_gpus:
            init["num_gpus"] = logical_gpus
        if resources:
            init["resources"] = resources
    from rlbridge.engine.lifeline import descendants, kill_descendants

    before = set(descendants())
    ray.init(**init)
    try:
        yield
    except BaseException as exc:
        if run_dir is not None and getattr(exc, "failure", None) is None:
            try:
                exc.failure = describe_ray_failure(exc, _keep_ray_logs(tmp, Path(run_dir)))
            except Exception:  # describing a failure must never hide it
                pass
        raise
    finally:
        try:
            if run_dir is not None:  # where the engine placed its actors, read while the cluster is up
                from rlbridge.engine.ray_placement import snapshot

                snapshot(run_dir, env.get(EVENTS_ENV))
            ray.shutdown()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if not address:  # what the private cluster started and left (orphaned vLLM engines...) goes too
                kill_descendants(grace_s=3.0, exclude=before)


def _keep_ray_logs(tmp: Path, run_dir: Path) -> Path:
    """Copy the session's logs (workers, raylet, GCS) out of the private temp dir before it goes."""
    target = run_dir / "logs" / "ray"
    sessions = sorted(tmp.glob("session_*/logs"))
    if sessions:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(sessions[-1], target, ignore=shutil.ignore_patterns("*.sock", "events"), dirs_exist_ok=True)
    return target
