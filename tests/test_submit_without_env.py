"""`rlbridge submit` plans here but runs on the cluster's nodes, in their engine environment: a machine
with no engine environment of its own (a laptop, a login node) still writes the job, native rewards of
the engine included."""

import pytest

from tests.conftest import QUICKSTART, run_cli

SCORER = "{native: verl, function: 'verl.utils.reward_score:default_compute_score'}"


def _submit(tmp_path, target, *sets):
    args = ["submit", str(QUICKSTART), "--to", target, "--dry-run"]
    for item in (
        "backend=verl",
        "resources.gpus_per_node=0",
        f"output_dir={tmp_path}/run",
        f"reward=[{SCORER}]",
        *sets,
    ):
        args += ["--set", item]
    return run_cli(*args, env={"RLBRIDGE_CACHE_DIR": str(tmp_path / "empty-cache")})


def test_slurm_dry_run_needs_no_local_engine_environment(tmp_path):
    res = _submit(tmp_path, "slurm")
    assert res.returncode == 0, res.stderr
    python = tmp_path / "empty-cache" / "envs" / "verl-0.9.1" / "bin"
    assert f"{python}/ray start --head" in res.stdout and f"{python}/python -c" in res.stdout
    assert "rlbridge env create verl==0.9.1" in res.stderr  # where the nodes need it, said once
    assert (tmp_path / "run" / "submit" / "job.sbatch").read_text() == res.stdout


def test_kuberay_dry_run_needs_no_local_engine_environment(tmp_path):
    pytest.importorskip("yaml")
    res = _submit(tmp_path, "kuberay", "launcher.kuberay.image=example.org/rlbridge-verl:0.9.1")
    assert res.returncode == 0, res.stderr
    assert "kind: RayJob" in res.stdout


def test_plan_still_asks_for_the_environment_it_checks_the_reward_in(tmp_path):
    """The same config planned to run here: the scorer is resolved in verl's environment, which is missing."""
    res = run_cli(
        "plan",
        str(QUICKSTART),
        *("--set", "backend=verl", "--set", f"reward=[{SCORER}]"),
        env={"RLBRIDGE_CACHE_DIR": str(tmp_path / "empty-cache")},
    )
    assert res.returncode == 2 and "rlbridge env create verl==0.9.1" in res.stderr, res.stderr
