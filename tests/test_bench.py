"""`rlbridge bench`: spec parsing, the fairness check, the statistics, and one small real bench on TRL
(2 arms that differ in one knob, 2 seeds, 3 steps) whose report files and numbers must be
consistent. No wall-time thresholds: the machine is shared."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlbridge.errors import ConfigError
from rlbridge.bench.arms import ArmSpec, build_jobs, load_spec, run_key
from rlbridge.bench.report import interval, verdict
from rlbridge.run.runner import resolve

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"


def write_spec(tmp_path: Path, **spec) -> Path:
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"config": str(QUICKSTART), **spec}))
    return path


def test_arm_strings():
    arm = ArmSpec.parse("verl@0.9.1 rollout.engine=hf")
    assert (arm.backend, arm.engine_version, arm.set, arm.kind) == ("verl", "0.9.1", ["rollout.engine=hf"], "rlbridge")
    assert arm.declared() == {"backend", "engine_version", "rollout.engine"}
    assert ArmSpec.parse("native:trl").kind == "native"
    with pytest.raises(ConfigError, match="must start with a backend"):
        ArmSpec.parse("rollout.temperature=0.5")


def test_undeclared_difference_is_refused(tmp_path):
    other = tmp_path / "other.yaml"
    data = yaml.safe_load(QUICKSTART.read_text())
    data["training"]["lr"] = 1.0e-3  # not declared by either arm
    other.write_text(yaml.safe_dump(data))
    spec = write_spec(tmp_path, arms=["trl", {"name": "b", "config": str(other), "set": ["rollout.temperature=0.7"]}])
    with pytest.raises(ConfigError, match=r"differ in training\.lr .*neither arm declares"):
        build_jobs(*load_spec(spec))


def test_declared_difference_is_shown_and_keys_differ(tmp_path):
    spec = write_spec(tmp_path, arms=["trl", "trl rollout.temperature=0.7"], seeds=[0, 1], set=["training.steps=3"])
    jobs, diffs = build_jobs(*load_spec(spec))
    assert list(diffs) == ["rollout.temperature"]
    assert diffs["rollout.temperature"] == {"trl": 1.0, "trl rollout.temperature=0.7": 0.7}
    assert len(jobs) == 4 and len({j.key for j in jobs}) == 4
    # arms alternate within a seed, and every other seed runs them in reverse (each arm first in half the pairs)
    assert [(j.arm, j.seed) for j in jobs] == [
        ("trl", 0),
        ("trl rollout.temperature=0.7", 0),
        ("trl rollout.temperature=0.7", 1),
        ("trl", 1),
    ]
    # the key is the resolved config: the same job in another output_dir has the same key
    moved = jobs[0].config.model_copy(deep=True)
    moved.output_dir = "/elsewhere"
    assert run_key(resolve(moved), jobs[0].engine, "rlbridge") == jobs[0].key
    moved.training.lr = 1e-3
    assert run_key(resolve(moved), jobs[0].engine, "rlbridge") != jobs[0].key


def test_bad_spec_names_the_field(tmp_path):
    spec = write_spec(tmp_path, arms=["trl"], seed=[1])
    with pytest.raises(ConfigError, match="seed"):
        load_spec(spec)


def test_statistics():
    ci = interval([1.0, 2.0, 3.0])
    assert ci["mean"] == 2.0 and ci["high"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert verdict([0.1, 0.11, 0.12], [0.9, 0.91, 0.92])["verdict"] == "differs"
    assert verdict([0.1, 0.3, 0.2], [0.15, 0.25, 0.2])["verdict"] == "same within seed noise"
    assert verdict([0.5, 0.5], [0.5, 0.5])["verdict"] == "identical"
    assert "Welch" in verdict([1.0, 2.0], [1.5, 2.5])["method"]


@pytest.mark.engine
def test_small_trl_bench_report_is_consistent(tmp_path):
    spec = write_spec(
        tmp_path,
        arms=["trl", "trl rollout.temperature=0.7"],
        seeds=[0, 1],
        target_reward=0.0,
        set=["training.steps=3", "training.batch_size=4", "algorithm.group_size=4", "rollout.max_new_tokens=8"],
    )
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "rlbridge", "bench", str(spec), "-o", str(out), "--no-progress"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "4 runs: 0 already done" in res.stderr
    for name in (
        "report.md",
        "results.json",
        "reward_vs_step.png",
        "reward_vs_wall.png",
        "phases.png",
        "throughput_memory.png",
    ):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "results.json").read_text())
    assert len(data["runs"]) == 4 and all(r["status"] == "completed" for r in data["runs"])
    assert data["rlbridge_commit"] and data["differences"] == {
        "rollout.temperature": {"trl": 1.0, "trl rollout.temperature=0.7": 0.7}
    }
    for run in data["runs"]:
        assert len(data["histories"][run["key"]]) == 3 and sorted(map(int, run["step_arrival_s"])) == [1, 2, 3]
        n = run["numbers"]
        for key in (
            "auc",
            "reward_final",
            "step_s",
            "gen_tokens_per_s",
            "samples_per_s",
            "startup_s",
            "wall_s",
            "train_s",
            "peak_tree_rss_mb",
            "cpu_s",
        ):
            assert isinstance(n[key], float) and math.isfinite(n[key]) and n[key] >= 0, key
        assert n["steps_to_target"] == 1  # target 0.0 is reached at the first step
        assert n["wall_s"] > n["train_s"] and n["startup_s"] < n["wall_s"]
        cpu = {int(k): v for k, v in run["step_cpu_s"].items()}  # the tree's CPU time at each step's arrival
        assert sorted(cpu) == [1, 2, 3] and cpu[1] <= cpu[2] <= cpu[3] <= n["cpu_s"]
        # TRL's own timers: generation and reward are timed; no reference (kl_coef 0) and no weight sync (HF rollout)
        assert {"timing/generate_s", "timing/reward_s", "timing/update_s", "timing/step_s"} <= set(n["phases"])
        assert "timing/ref_s" not in n["phases"] and "timing/weight_sync_s" not in n["phases"]
    for arm in data["arms"].values():
        agg = arm["aggregate"]
        assert arm["runs_completed"] == 2 and agg["auc"]["n"] == 2
        assert agg["auc"]["low"] <= agg["auc"]["mean"] <= agg["auc"]["high"]
    (pair,) = data["pairs"]
    assert (
        pair["auc"]["verdict"] in ("same within seed noise", "differs", "identical")
        and "Welch" in pair["auc"]["method"]
    )
    report = (out / "report.md").read_text()
    assert "Welch" in report and "rollout.temperature" in report and "| trl rollout.temperature=0.7 |" in report
    # an interrupted or repeated bench reuses finished runs
    (out / "runs" / sorted(p.name for p in (out / "runs").iterdir())[0] / "run.json").unlink()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "4 runs: 3 already done (reused), 1 to run" in res.stderr


@pytest.mark.engine
def test_trl_phase_timers(tmp_path):
    """TRL's own timers give the reference pass when there is a reference (kl_coef > 0), no old-policy
    pass (generation and update are aligned), and phases that fit in the step."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "rlbridge",
        "train",
        str(QUICKSTART),
        "--no-progress",
        "--set",
        "training.steps=2",
        "--set",
        "algorithm.kl_coef=0.05",
        "--set",
        "training.batch_size=4",
        "--set",
        "algorithm.group_size=4",
        "--set",
        f"output_dir={out}",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["timing/ref_s"] > 0 and row["timing/generate_s"] > 0 and row["timing/reward_s"] > 0
        assert "timing/old_logprob_s" not in row and "timing/weight_sync_s" not in row
        phases = row["timing/generate_s"] + row["timing/reward_s"] + row["timing/ref_s"]
        assert phases <= row["timing/step_s"]


def test_lock_slots(tmp_path):
    """--lock FILE repeated: each run takes the first free slot, waits while every slot is held, and
    holds none between runs (the machine's other jobs take the slots through the same files)."""
    import fcntl
    import threading
    import time

    from rlbridge.bench.arms import _locked

    slots = [tmp_path / "slot1.lock", tmp_path / "slot2.lock"]
    other = open(slots[0], "a")
    fcntl.flock(other, fcntl.LOCK_EX)  # another job holds slot 1
    probe = open(slots[1], "a")
    with _locked(slots, poll_s=0.05) as waited:
        assert waited < 1.0
        with pytest.raises(BlockingIOError):  # the run holds slot 2
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the run
    # both held: the run waits until one frees
    threading.Timer(0.4, lambda: fcntl.flock(other, fcntl.LOCK_UN)).start()
    start = time.perf_counter()
    with _locked(slots, poll_s=0.05) as waited:
        assert time.perf_counter() - start >= 0.35 and waited >= 0.35
    fcntl.flock(probe, fcntl.LOCK_UN)


def _reward_file(text: str, name: str):
    namespace: dict = {}
    exec(compile(text, name, "exec"), namespace)
    return namespace


@pytest.mark.parametrize(
    "completion,eos,cap",
    [("7777777", False, 7), ("77a7", True, 16), ("", True, 16), ("1234", False, 4), ("777", True, 4)],
)
def test_native_reward_files_are_the_task_reward(completion, eos, cap):
    """The native verl and OpenRLHF arms score with a reward file in the engine's own convention; it must
    give the quickstart's digit_match (plugins/rewards.py) on the byte-level tiny-digits tokenizer, whose
    denominator counts the end-of-sequence token too. A response without one fills the cap (`cap`:
    rollout.max_new_tokens); verl decodes without special tokens, so its file infers the token from the
    length, OpenRLHF's sees it in the decoded text."""
    from plugins.rewards import digit_match
    from rlbridge.contract.rewards import RewardInput
    from rlbridge_adapters.openrlhf.native import REWARD_FILES as ORL
    from rlbridge_adapters.verl.native import REWARD_FILES as VERL

    ids = list(range(len(completion) + (1 if eos else 0)))
    expected = digit_match()([RewardInput("7777", completion, ids, "7")])[0]
    prompt = "<|im_start|>user\n7777<|im_end|>\n<|im_start|>assistant\n"
    query = prompt + completion + ("<|im_end|>" if eos else "")
    got = _reward_file(ORL["digit_match"], "reward_func.py")["reward_func"]([query], [prompt], ["7"])
    assert got["rewards"].tolist() == pytest.approx([expected])
    verl = _reward_file(VERL["digit_match"].replace("{max_new_tokens}", str(cap)), "reward_fn.py")["compute_score"]
    assert verl("rlbridge", completion, "7") == pytest.approx(expected)


def test_native_verl_log_to_canonical(tmp_path):
    """verl's own `file` logger lines (one per step, validation lines too) -> canonical metrics.jsonl."""
    from rlbridge_adapters.verl.native import canonical

    raw = tmp_path / "verl.jsonl"
    raw.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {
                    "step": 1,
                    "data": {
                        "critic/score/mean": 0.25,
                        "timing_s/step": 2.5,
                        "timing_s/gen": 1.5,
                        "actor/pg_loss": -0.1,
                    },
                },
                {"step": 2, "data": {"val-core/rlbridge/reward/mean@1": 0.5}},
                {
                    "step": 2,
                    "data": {"critic/score/mean": 0.5, "timing_s/step": 2.0, "actor/pg_loss": 0.2, "note": "text"},
                },
            ]
        )
        + "\n"
    )
    canonical(raw, tmp_path / "metrics.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["reward/mean"] == 0.25 and rows[0]["timing/step_s"] == 2.5 and rows[0]["timing/generate_s"] == 1.5
    assert rows[1]["loss/policy"] == 0.2


def test_runs_keyed_by_an_older_key_are_found_by_their_config(tmp_path):
    """Fields at their default are not part of the key (a knob added to rlbridge keeps finished runs),
    and a run directory named with another key function's key is found by the config it ran."""
    from rlbridge.bench.arms import key_from_files

    spec = write_spec(tmp_path, arms=["trl"], seeds=[3], set=["training.steps=3"])
    (job,), _ = build_jobs(*load_spec(spec))
    old = tmp_path / "runs" / "00-trl-seed3-0123456789ab"
    old.mkdir(parents=True)
    (old / "config.in.yaml").write_text(yaml.safe_dump(job.config.model_dump(mode="json", exclude_unset=True)))
    (old / "run.json").write_text(json.dumps({"status": "completed", "engine": job.engine, "kind": "rlbridge"}))
    assert key_from_files(old) == job.key
    (old / "run.json").write_text(json.dumps({"status": "completed", "engine": job.engine, "kind": "native"}))
    assert key_from_files(old) != job.key  # the kind of run is part of the key
    from rlbridge.contract.config import RunConfig

    class Newer(RunConfig):  # rlbridge with one more knob, at a default that keeps the old behaviour
        new_knob: int = 0

    resolved = resolve(job.config)
    assert run_key(Newer.model_validate(resolved.model_dump()), job.engine, "rlbridge") == job.key
    assert run_key(Newer.model_validate({**resolved.model_dump(), "new_knob": 1}), job.engine, "rlbridge") != job.key


def _env_python(name: str) -> Path | None:
    from rlbridge.envs.create import find_env
    from rlbridge.engine.environments import env_python

    try:
        return env_python(find_env(*name.split("@")))
    except Exception:
        return None


def _native_arm_runs(engine: str, entry_point: str, tmp_path) -> None:
    """The native arm of `engine` (ENGINE@VERSION) runs `python -m entry_point` with the CPU-enablement patches
    only and the task reward as the engine's own reward file; its per-step log comes back under canonical names."""
    arm = f"native:{engine}"
    if _env_python(engine) is None:
        pytest.skip(f"no engine environment for {engine} (rlbridge env create)")
    spec = write_spec(
        tmp_path,
        arms=[arm],
        seeds=[0],
        set=["training.steps=2", "training.batch_size=4", "algorithm.group_size=4", "rollout.max_new_tokens=8"],
    )
    out = tmp_path / "bench"
    res = subprocess.run(
        [sys.executable, "-m", "rlbridge", "bench", str(spec), "-o", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "completed" and run["command"][1:3] == ["-m", entry_point]
    assert [r["step"] for r in run["history"]] == [1, 2] and sorted(map(int, run["step_arrival_s"])) == [1, 2]
    for row in run["history"]:
        assert 0.0 <= row["reward/mean"] <= 1.0 and row["timing/step_s"] > 0
    from rlbridge.engine.patches import PatchKind

    module = f"rlbridge_adapters.{engine.split('@')[0]}.patches"
    probe = subprocess.run(
        [
            str(_env_python(engine)),
            "-c",
            f"import json; from {module} import PATCHES; print(json.dumps({{p.name: p.kind.value for p in PATCHES}}))",
        ],
        capture_output=True,
        text=True,
    )
    kinds = json.loads(probe.stdout.strip().splitlines()[-1])
    applied = {
        e["patch"]
        for f in (run_dir / "run" / "patches").glob("*.json")
        for e in json.loads(f.read_text())["patches"]
        if e["status"] == "applied"
    }
    assert applied and all(kinds[name] == PatchKind.CPU_ENABLEMENT.value for name in applied), applied
    assert list((run_dir / "run").glob("reward_f*.py"))  # the engine's own reward file, no rlbridge reward path


@pytest.mark.engine
@pytest.mark.engine_env
@pytest.mark.matrix_only  # make compat only: an engine run, minutes on CPU
def test_native_verl_arm_runs_main_ppo(tmp_path):
    _native_arm_runs("verl@0.9.1", "verl.trainer.main_ppo", tmp_path)


@pytest.mark.engine
@pytest.mark.engine_env
@pytest.mark.matrix_only  # make compat only: an engine run, minutes on CPU
def test_native_openrlhf_arm_runs_train_ppo_ray(tmp_path):
    _native_arm_runs("openrlhf@0.11.2", "openrlhf.cli.train_ppo_ray", tmp_path)


def test_native_overhead_pairs_each_seed_and_names_the_order():
    """The overhead table: one pair per seed of an rlbridge arm and its native arm, which of the two ran
    first, the ratios, identical rewards only when every step agrees, and CPU ratios only for an engine
    that runs in one process tree (a native Ray engine's workers are outside the measured process tree)."""
    from types import SimpleNamespace

    from rlbridge.bench import report as bench_report
    from rlbridge.contract.registry import get_plugin_manager

    backends = get_plugin_manager().items["backend"]
    # a backend of each kind the CPU ratio tells apart (Backend.scores_in_engine_workers: its Ray workers)
    tree = next(name for name, r in sorted(backends.items()) if not r.item.scores_in_engine_workers)
    ray = next(name for name, r in sorted(backends.items()) if r.item.scores_in_engine_workers)

    class Config(SimpleNamespace):
        def model_dump(self, exclude=()):
            return {k: v for k, v in vars(self).items() if k not in exclude}

    arms = {
        name: {"kind": kind, "backend": backend}
        for name, kind, backend in [
            (tree, "rlbridge", tree),
            (f"native:{tree}", "native", tree),
            (ray, "rlbridge", ray),
            (f"native:{ray}", "native", ray),
        ]
    }
    jobs = [
        SimpleNamespace(arm=name, config=Config(backend=a["backend"], lr=0.005, run_name=name))
        for name, a in arms.items()
    ]

    def run(arm, seed, started, wall, step, cpu, rewards):
        key = f"{arm}-{seed}"
        bench_report._HISTORIES[key] = [{"step": i + 1, "reward/mean": r} for i, r in enumerate(rewards)]
        return {
            "arm": arm,
            "seed": seed,
            "key": key,
            "status": "completed",
            "started_at": started,
            "numbers": {"wall_s": wall, "step_s": step, "fixed_s": wall - 10 * step, "cpu_s": cpu},
        }

    runs = [
        run(tree, 0, 100, 12.0, 0.5, 20.0, [0.1, 0.2]),
        run(f"native:{tree}", 0, 200, 10.0, 0.5, 16.0, [0.1, 0.2]),
        run(f"native:{tree}", 1, 300, 10.0, 0.4, 16.0, [0.1, 0.3]),
        run(tree, 1, 400, 11.0, 0.5, 18.0, [0.1, 0.2]),
        run(ray, 0, 500, 110.0, 1.1, 30.0, [0.1]),
        run(f"native:{ray}", 0, 600, 100.0, 1.0, 20.0, [0.1]),
    ]
    try:
        table = bench_report.native_overhead(arms, runs, jobs)
    finally:
        bench_report._HISTORIES.clear()
    tree_row, ray_row = table
    assert (tree_row["rlbridge_arm"], tree_row["native_arm"]) == (tree, f"native:{tree}")
    assert [(p["seed"], p["first"]) for p in tree_row["pairs"]] == [(0, "rlbridge"), (1, "native")]
    assert tree_row["rlbridge_first"] == 1 and tree_row["wall_ratio_target"] == 1.02
    assert [p["wall_ratio"] for p in tree_row["pairs"]] == [1.2, 1.1]
    assert tree_row["median_wall_ratio"] == pytest.approx(1.15)
    assert [p["rewards_identical"] for p in tree_row["pairs"]] == [True, False]
    assert not tree_row["rewards_identical_all"]
    assert tree_row["pairs"][0]["cpu_ratio"] == pytest.approx(1.25)
    assert ray_row["pairs"][0]["cpu_ratio"] is None and ray_row["median_cpu_ratio"] is None
    assert ray_row["pairs"][0]["fixed_extra_s"] == pytest.approx(9.0)
    text = bench_report.markdown({**_empty_report(), "native_overhead": table}, [])
    assert f"| {tree} | native:{tree} | 2 (1) | 1.15 | 1.20, 1.10 |" in text and "<= 1.02" in text


def _empty_report() -> dict:
    return {
        "arms": {},
        "pairs": [],
        "native_overhead": [],
        "statistics": {},
        "differences": {},
        "steps": 0,
        "reward_at": [],
        "window": 1,
        "rlbridge_version": "0",
        "rlbridge_commit": None,
        "python": "3",
        "machine": "m",
        "date_utc": "d",
        "spec": {"seeds": [], "arms": [], "alpha": 0.05},
        "runs": [],
    }


def test_the_report_names_the_commits_when_its_runs_come_from_several(tmp_path):
    """A bench reuses a finished run by its config, whatever code ran it: the report says which commit ran which."""
    from rlbridge.bench import report as bench_report
    from rlbridge.bench.arms import load_done

    run_dir = tmp_path / "00-trl-seed0-0123456789ab"
    (run_dir / "run").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"status": "completed", "arm": "trl", "seed": 0}))
    (run_dir / "run" / "manifest.json").write_text(json.dumps({"rlbridge": {"commit": "a" * 40, "dirty": False}}))
    assert load_done(run_dir)["rlbridge_commit"] == "a" * 40  # a run.json from before the field: its manifest
    one = {"a" * 40: ["trl seed 0", "trl seed 1"]}
    two = {**one, "b" * 40: ["verl seed 0"]}
    assert "The runs come from" not in bench_report.markdown({**_empty_report(), "run_commits": one}, [])
    text = bench_report.markdown({**_empty_report(), "run_commits": two}, [])
    assert "**The runs come from 2 commits** (aaaaaaaaaa: 2 runs; bbbbbbbbbb: 1 run (verl seed 0))" in text


def test_an_offline_stage_is_judged_by_its_loss():
    """SFT/DPO/RM arms (docs/stages.md): the learning curve is the stage's loss, a row is one sample."""
    from rlbridge.bench.report import curve_metric, run_numbers
    from rlbridge.run.loading import load_config

    config = resolve(load_config(REPO / "configs" / "sft.yaml", ["training.steps=4", "training.batch_size=8"]))
    history = [
        {"step": s, "loss/sft": loss, "timing/step_s": 0.5} for s, loss in ((1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0))
    ]
    numbers = run_numbers({"history": history}, config, [2, 4], 2, None)
    assert curve_metric(config) == "loss/sft" and curve_metric(resolve(load_config(QUICKSTART))) == "reward/mean"
    assert (numbers["auc"], numbers["reward_at_2"], numbers["reward_final"]) == (2.5, 3.5, 1.5)
    assert numbers["samples_per_s"] == 16.0  # 8 rows per 0.5 s step (no group of samples per row)


def test_a_native_arm_declared_to_run_here_is_refused_in_an_engine_environment(tmp_path):
    """Backend.native_arm_runs_here, read through the registry: such a native arm whose engine resolves to an
    engine environment (here: this virtual environment, named as one) is refused before anything starts; the
    other native arms run there."""
    from rlbridge.contract.registry import get_plugin_manager

    with_arm = {name: r.item for name, r in get_plugin_manager().items["backend"].items() if r.item.native_arm}
    assert any(backend.native_arm_runs_here for backend in with_arm.values())  # both answers are exercised
    for name, backend in sorted(with_arm.items()):
        spec = write_spec(
            tmp_path, arms=[f"native:{name} engine_env={sys.prefix}"], seeds=[0], set=["training.steps=2"]
        )
        if backend.native_arm_runs_here:
            with pytest.raises(
                ConfigError, match=rf"arm 'native:{name} .*': kind native runs the engine installed here"
            ):
                build_jobs(*load_spec(spec))
        else:
            (job,) = build_jobs(*load_spec(spec))[0]
            assert job.kind == "native" and not job.engine.startswith("here:"), name
