"""`rlbridge submit CONFIG --address URL`: run a job on an existing Ray cluster through Ray's job
submission API (the cluster's dashboard address, e.g. http://head:8265), with its logs streamed back.

Everything that can fail is checked here first (`prepare`: schema, plugins, capability table,
plan), so a bad config never reaches the cluster. The resolved config travels as the job's
`working_dir`; the job runs `python -m rlbridge train config.yaml` with the cluster's Python, and a
Ray engine's driver joins the cluster it runs on (`resources.ray_address: auto`). The cluster's nodes need rlbridge and
the engine installed, as for any Ray
job. `output_dir` is written where the job's driver runs (the head node); the job's status, logs and
id are written to `<output_dir>/submit/` here.

The submitting side needs Ray's client library, which lives in the engine environments: the user's
process plans, then hands the submission to the engine environment's Python
(`python -m rlbridge.submit.job`), which stays connected until the job ends.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def submit(config, address: str, job_python: str | None = None, echo=print) -> int:
    """Plan `config` here, then submit it as a Ray job to `address` and follow it; returns the exit
    code (0 when the job succeeded)."""
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.run.loading import dump_config
    from rlbridge.run.runner import prepare, uses_ray

    config = config.model_copy(deep=True)
    if uses_ray(get_plugin_manager().backend(config.backend)) and not config.resources.ray_address:
        config.resources.ray_address = "auto"  # Ray's word for the cluster the job's driver runs in
    prepared = prepare(config, engine_elsewhere=True)
    client_python = _python_with_ray(local_engine_python(prepared))
    record = Path(prepared.config.output_dir) / "submit"
    record.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlb-job-") as work:
        job_config = prepared.config.model_copy(deep=True)
        job_config.output_dir = str(Path(job_config.output_dir).resolve())  # not inside Ray's working_dir copy
        if job_config.checkpoint.dir:
            job_config.checkpoint.dir = str(Path(job_config.checkpoint.dir).resolve())
        Path(work, "config.yaml").write_text(dump_config(job_config))
        # the job runs what the user would run here: this rlbridge, which picks the engine environment
        entrypoint = f"{job_python or sys.executable} -m rlbridge train config.yaml --no-progress"
        echo(f"submitting to {address}: {entrypoint}")
        cmd = [
            str(client_python),
            "-m",
            "rlbridge.submit.job",
            "--address",
            address,
            "--working-dir",
            work,
            "--entrypoint",
            entrypoint,
            "--record",
            str(record),
        ]
        return subprocess.run(cmd).returncode


def plan_job(config, target: str):
    """Plan `config` here for a batch system (`target`: slurm or kuberay): every check that can fail
    (as `rlbridge plan`), then the config the job itself runs. Returns (prepared, job config)."""
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.errors import ConfigError
    from rlbridge.run.runner import prepare, uses_ray

    if config.resources.gpus_per_node == "auto":
        raise ConfigError(
            f"resources.gpus_per_node: 'auto' counts this machine's GPUs, not those of the {target} nodes; "
            "set the number each node has (0 for CPU only)"
        )
    config = config.model_copy(deep=True)
    if uses_ray(get_plugin_manager().backend(config.backend)) and not config.resources.ray_address:
        config.resources.ray_address = "auto"  # the Ray cluster the job starts (Slurm) or runs in (KubeRay)
    prepared = prepare(config, engine_elsewhere=True)  # the job runs on the cluster's nodes, in their environment
    job = prepared.config.model_copy(deep=True)
    job.checkpoint.resume = config.checkpoint.resume  # decided where the job runs, not here
    return prepared, job


def local_engine_python(prepared) -> Path | None:
    """This machine's Python for the engine: None where it runs in this one, and None where this machine has
    no engine environment for it (a job's nodes use their own)."""
    from rlbridge.envs.create import EnvError
    from rlbridge.run.runner import choose_engine_python

    try:
        return choose_engine_python(prepared.config, prepared.backend)
    except EnvError:
        return None


def job_engine_python(prepared) -> Path:
    """The engine's Python on a job's nodes that share this machine's file system: this machine's engine
    environment (or this Python, where the engine runs in it); with no environment here, the path `rlbridge env
    create` gives it in this cache, which the nodes then need (said on stderr). A job submitted needs none here."""
    from rlbridge.envs.create import EnvError, recipe_for
    from rlbridge.engine.environments import env_path, env_python
    from rlbridge.run.runner import choose_engine_python

    try:
        return choose_engine_python(prepared.config, prepared.backend) or Path(sys.executable)
    except EnvError:
        name, version = prepared.backend.name, prepared.config.engine_version
        label = recipe_for(name if version is None else f"{name}=={version}").label
        python = env_python(env_path(name, label))
        print(
            f"no {name}=={label} engine environment here: the job's nodes run {python} (create it where they "
            f"see it: `rlbridge env create {name}=={label}`), or give --job-python",
            file=sys.stderr,
        )
        return python


def _python_with_ray(engine_python: Path | None) -> Path:
    """A Python that has Ray's job client: this one, the backend's engine environment, or any
    complete engine environment (the user's own environment usually has no Ray)."""
    from rlbridge.engine.environments import env_python, envs_dir, is_complete
    from rlbridge.errors import RLBridgeError

    built = sorted(p for p in envs_dir().glob("*") if p.is_dir() and is_complete(p)) if envs_dir().exists() else []
    candidates = [Path(sys.executable), *([engine_python] if engine_python else []), *(env_python(p) for p in built)]
    for python in candidates:
        if subprocess.run([str(python), "-c", "import ray.job_submission"], capture_output=True).returncode == 0:
            return python
    raise RLBridgeError(
        "rlbridge submit needs Ray's job client: create an engine environment that has Ray "
        "(rlbridge env create ENGINE, for a backend that runs on Ray) or install ray[default] here"
    )


def _follow(address: str, working_dir: str, entrypoint: str, record: Path) -> int:
    import asyncio

    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    passed = {k: v for k, v in os.environ.items() if k in ("RLBRIDGE_CACHE_DIR", "HF_HUB_OFFLINE", "PYTHONPATH")}
    deadline = time.time() + 300
    while True:  # a cluster that just started answers 504 until its node's job agent is up
        try:
            job_id = client.submit_job(
                entrypoint=entrypoint, runtime_env={"working_dir": working_dir, "env_vars": passed}
            )
            break
        except RuntimeError as exc:
            if "504" not in str(exc) or time.time() > deadline:
                raise
            print("the cluster's job agent is not up yet; retrying", flush=True)
            time.sleep(5)
    started = time.time()
    (record / "job.json").write_text(
        json.dumps({"job_id": job_id, "address": address, "entrypoint": entrypoint}, indent=2)
    )
    print(f"job {job_id} submitted; following its logs", flush=True)

    async def tail() -> None:
        with open(record / "job.log", "w", encoding="utf-8") as log:
            async for lines in client.tail_job_logs(job_id):
                sys.stdout.write(lines)
                sys.stdout.flush()
                log.write(lines)

    asyncio.run(tail())
    while (status := str(client.get_job_status(job_id)).split(".")[-1]) not in TERMINAL:
        time.sleep(1)
    info = client.get_job_info(job_id)
    result = {"job_id": job_id, "status": status, "message": info.message, "wall_s": round(time.time() - started, 1)}
    (record / "job.json").write_text(json.dumps({**json.loads((record / "job.json").read_text()), **result}, indent=2))
    print(
        f"job {job_id}: {status}" + (f" ({info.message})" if status != "SUCCEEDED" and info.message else ""), flush=True
    )
    return 0 if status == "SUCCEEDED" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlbridge.submit.job")
    parser.add_argument("--address", required=True)
    parser.add_argument("--working-dir", required=True)
    parser.add_argument("--entrypoint", required=True)
    parser.add_argument("--record", required=True)
    args = parser.parse_args(argv)
    return _follow(args.address, args.working_dir, args.entrypoint, Path(args.record))


if __name__ == "__main__":
    sys.exit(main())
