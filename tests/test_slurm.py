"""`rlbridge submit --to slurm` on a real Slurm: Debian's slurm-wlm and munge, started on loopback
by scripts/slurm-local.sh (one node with this machine's CPUs; config and state in a directory of
their own). The TRL quickstart runs as a Slurm job; scancel of a running job leaves none of its
processes behind; a requeued job resumes from its last complete checkpoint with no step twice.
The verl 0.9.1 job (a Ray head started by the batch script) is `matrix_only`."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlbridge.run.loading import load_config
from rlbridge.submit.slurm import TERMINAL_STATES
from rlbridge.testing import QUICKSTART

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
SLURM_DIR = Path(os.environ.get("RLBRIDGE_SLURM_DIR", "/tmp/rlbridge-slurm"))
# small, and each step slow enough (a sleeping reward of weight 0) for the test to act mid-run
QUICK = [
    "resources.gpus_per_node=0",
    "resources.cpus_per_node=2",
    "training.batch_size=2",
    "algorithm.group_size=4",
    "rollout.max_new_tokens=8",
]


@pytest.fixture(scope="module")
def slurm():
    """A running local Slurm (SLURM_CONF in the environment); stopped at the end if this started it."""
    up = SLURM_DIR / "slurmctld.pid"
    was_up = up.exists() and subprocess.run(["kill", "-0", up.read_text().strip()], capture_output=True).returncode == 0
    res = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        why = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        if shutil.which("slurmctld") is None:
            pytest.skip(f"Slurm is not installable here (scripts/slurm-local.sh install: {why[0]})")
        pytest.fail(f"slurm-local.sh start failed: {res.stdout}\n{res.stderr}")
    conf = str(SLURM_DIR / "slurm.conf")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    yield conf
    if saved is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = saved
    if not was_up:
        subprocess.run([str(SCRIPT), "stop"], capture_output=True)


def _submit(out: Path, *overrides: str, follow: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    args = [a for o in [*QUICK, *overrides, f"output_dir={out}"] for a in ("--set", o)]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rlbridge",
            "submit",
            str(QUICKSTART),
            "--to",
            "slurm",
            *([] if follow else ["--no-follow"]),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _job_id(out: Path) -> str:
    return json.loads((out / "submit" / "slurm.json").read_text())["job_id"]


def _state(job_id: str) -> str | None:
    res = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    fields = dict(f.split("=", 1) for f in res.stdout.split() if "=" in f)
    return fields.get("JobState")


def _job_log(out: Path, job_id: str) -> str:
    path = out / "submit" / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else f"(no {path.name})"


def _wait(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _steps(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def _events(out: Path) -> list[dict]:
    path = out / "submit" / "slurm_events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _job_processes(job_id: str) -> list[int]:
    """Live processes of this Slurm job: every process Slurm starts for a job carries SLURM_JOB_ID."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in env:
            found.append(int(proc.name))
    return found


def test_dry_run_prints_the_batch_script_with_the_allocation_and_the_launcher_settings(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlbridge",
            "submit",
            str(QUICKSTART),
            "--to",
            "slurm",
            "--dry-run",
            *(
                a
                for o in [
                    "backend=verl",
                    "resources.nodes=2",
                    "resources.gpus_per_node=4",
                    "resources.cpus_per_node=32",
                    "training.batch_size=8",
                    "checkpoint.interval=10",
                    "launcher.slurm.partition=gpu-long",
                    "launcher.slurm.account=rl-team",
                    "launcher.slurm.qos=high",
                    "launcher.slurm.time=08:00:00",
                    "launcher.slurm.container_image=nvcr.io#nvidia/pytorch:25.01-py3",
                    "launcher.slurm.container_mounts=[/lustre:/lustre]",
                    "launcher.slurm.sbatch_lines=[--constraint=h100]",
                    "launcher.slurm.setup=[module load cuda/12.4]",
                    "launcher.slurm.max_requeues=3",
                    "launcher.slurm.requeue_signal_s=300",
                    "launcher.slurm.ray_port=6390",
                    f"output_dir={tmp_path}/run",
                ]
                for a in ("--set", o)
            ),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    script = res.stdout
    for directive in (
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=32",
        "--gpus-per-node=4",
        "--partition=gpu-long",
        "--account=rl-team",
        "--qos=high",
        "--time=08:00:00",
        "--requeue",
        "--signal=B:USR1@300",
        "--constraint=h100",
    ):
        assert f"#SBATCH {directive}\n" in script, directive
    assert "module load cuda/12.4\n" in script and "MAX_REQUEUES=3\n" in script
    assert "--container-image='nvcr.io#nvidia/pytorch:25.01-py3' --container-mounts=/lustre:/lustre" in script
    assert (
        "ray start --head --block" in script
        and "--port=6390" in script
        and 'ray start --block --address="$RAY_ADDRESS"' in script
    )
    assert "python -m rlbridge train" in script and "trap on_term TERM INT" in script
    assert (tmp_path / "run" / "submit" / "job.sbatch").read_text() == script
    assert (
        subprocess.run(["bash", "-n", str(tmp_path / "run" / "submit" / "job.sbatch")]).returncode == 0
    )  # valid shell
    job = yaml.safe_load((tmp_path / "run" / "submit" / "config.yaml").read_text())
    assert job["checkpoint"]["resume"] == "auto" and job["resources"]["ray_address"] == "auto"


def test_requeue_needs_checkpoints():
    from rlbridge.errors import ConfigError
    from rlbridge.submit.slurm import prepare_job

    with pytest.raises(ConfigError, match=r"checkpoint\.interval"):
        prepare_job(load_config(QUICKSTART, [*QUICK, "launcher.slurm.max_requeues=2"]))


def test_the_quickstart_runs_as_a_slurm_job(slurm, tmp_path):
    out = tmp_path / "run"
    res = _submit(out, "training.steps=3")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert _steps(out) == [1, 2, 3]
    record = json.loads((out / "submit" / "slurm.json").read_text())
    assert record["state"] == "COMPLETED" and record["job_id"]
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert [e["event"] for e in _events(out)] == ["start", "end"] and _events(out)[-1]["rc"] == 0
    assert "done: 3 steps" in (out / "submit" / f"slurm-{record['job_id']}.out").read_text()


def test_scancel_of_a_running_job_leaves_no_process_behind(slurm, tmp_path):
    out = tmp_path / "run"
    res = _submit(out, "training.steps=200", follow=False)
    assert res.returncode == 0, res.stderr[-3000:]
    job_id = _job_id(out)
    _wait(lambda: _steps(out), 300, "the job's first training step")
    assert _job_processes(job_id), "no process of the running job found"
    subprocess.run(["scancel", job_id], check=True)
    _wait(lambda: _state(job_id) in (None, "CANCELLED"), 120, "the job to be cancelled")
    left = _wait(lambda: not _job_processes(job_id) or None, 60, "the job's processes to end")
    assert left
    assert "terminated" in [e["event"] for e in _events(out)]
    assert len(_steps(out)) < 200


def test_a_requeued_job_resumes_from_its_checkpoint_with_no_step_twice(slurm, tmp_path):
    out = tmp_path / "run"
    res = _submit(
        out,
        "training.steps=8",
        "checkpoint.interval=2",
        "launcher.slurm.max_requeues=1",
        # a step of over a second (a sleeping reward of weight 0): the requeue lands mid-run
        "reward=[{name: digit_match}, {native: trl, function: 'rlbridge.testing.slow_reward:pause', weight: 0.0, "
        "args: {seconds: 1.0}}]",
        follow=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    job_id = _job_id(out)
    _wait(lambda: len(_steps(out)) >= 3, 300, "step 3 (after the checkpoint of step 2)")
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    # Slurm holds a requeued job back for the credential lifetime (cred_expire=10 in slurm-local.sh); a
    # start forced sooner (scontrol update StartTime=now) races the old credential's revocation
    _wait(lambda: _state(job_id) == "PENDING", 120, "the job to be pending again")
    state = _wait(lambda: _state(job_id) in TERMINAL_STATES and _state(job_id), 600, "the requeued job to end")
    assert state == "COMPLETED", (state, _job_log(out, job_id)[-3000:])
    steps = _steps(out)
    assert steps == list(range(1, 9)), steps  # every step once: resumed, not restarted, not repeated
    events = [(e["event"], e["restart"]) for e in _events(out)]
    assert events[0] == ("start", 0) and ("terminated", 0) in events and ("start", 1) in events, events
    assert events[-1] == ("end", 1) and _events(out)[-1]["rc"] == 0, events
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary.get("previous_run") is not None


@pytest.mark.engine
@pytest.mark.matrix_only  # the verl 0.9.1 cell of make compat: a Ray head started by the batch script
def test_the_verl_quickstart_runs_as_a_slurm_job_on_a_ray_head_the_job_starts(slurm, tmp_path):
    verl = pytest.importorskip("verl", reason="runs in the verl engine environment (rlbridge compat run --engine verl)")
    if tuple(int(x) for x in verl.__version__.split(".")[:2]) < (0, 9):
        pytest.skip("one engine version proves the seam: verl 0.9")
    out = tmp_path / "run"
    from rlbridge.helpers import free_port

    port = free_port()  # for the job's Ray head: other Ray clusters may run on this machine
    # the whole node (--exclusive): Ray declares the 8 logical CPUs of verl's plan, as a local run's cluster does
    res = _submit(
        out,
        "backend=verl",
        "engine_env=current",
        "training.steps=2",
        "resources.cpus_per_node=null",
        f"launcher.slurm.ray_port={port}",
        timeout=900,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert _steps(out) == [1, 2]
    events = _events(out)
    assert [e["event"] for e in events] == ["start", "ray_up", "end"], events
    assert events[1]["ray_address"].endswith(f":{port}")
    assert not _job_processes(_job_id(out))  # the Ray head and its processes went with the job
    assert "address: auto" in (out / "plan.yaml").read_text()
