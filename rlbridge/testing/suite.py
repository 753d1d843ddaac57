"""The conformance suite every backend must pass (like SQLAlchemy's dialect compliance suite).

Import it into a test module (`from rlbridge.testing.suite import *`, see `rlbridge.testing`). By
default it runs against each registered backend whose engine is installed in this environment (the
others are skipped, saying why), so `rlbridge compat run` can run it in each engine environment; a
backend package overrides the `backend` fixture to run it against its own backend only. What a test
needs (environment plugins, checkpoints) is read from the backend's capability table:

* translate: the plan of every standard config validates with the engine's own config code; the
  capability table covers every canonical knob.
* knob effects (`rlbridge.testing.effects`, marked `plans_only`: they run for every registered
  backend, installed or not): the sample value of every canonical knob lands on the native keys the
  backend's own `knob_effects()` declares, or is refused naming the knob.
* e2e (marked `engine`): a 2-step run through the engine's own trainer calls the rlbridge reward
  shim with the right inputs and produces finite canonical metrics; checkpoints are reported through
  the checkpoint hook and a resumed run goes on from the last one; where the backend runs environment
  plugins, a 2-step run drives one through the engine's own multi-turn machinery; an engine whose
  work runs in Ray workers fails the run naming the worker that was SIGKILLed mid-run, its error
  lines and log, and leaves no process behind; after SIGKILL of the whole run mid-training,
  `rlbridge train --resume` continues from the last complete checkpoint with the same step
  numbering, data order and learning-rate schedule (metrics identical where the backend declares
  `resume_reproduces_metrics`); on a Ray engine, a Ray actor stopped with SIGSTOP or a reward plugin that
  never returns is a hang the watchdog names (process, role, frame, stacks) within its bound, and with
  training.max_restarts the run restarts and completes.
"""

import json
import math
import os

import pytest
import yaml

from rlbridge.contract.backend import Support, canonical_knobs
from rlbridge.errors import RLBridgeError
from rlbridge.run.loading import load_config
from rlbridge.contract.registry import PluginManager, get_plugin_manager, reset_plugin_manager
from rlbridge.run.runner import prepare, train
from rlbridge.testing import QUICKSTART, install_plugin_distribution, requirement_unmet, standard_configs
from rlbridge.testing.effects import (  # noqa: F401  (the knob effect test is part of the suite)
    test_every_canonical_knob_has_a_sample_value,
    test_every_knob_takes_effect,
    test_knob_effects_cover_every_knob_the_backend_accepts,
    test_seed_changes_first_step_samples_and_evaluation_is_logged,
)

STANDARD_CONFIGS = standard_configs()
REQUIRED_METRICS = {
    "reward/mean",
    "reward/std",
    "loss/policy",
    "grad_norm",
    "response_length/mean",
    "timing/step_s",
    "timing/generate_s",
    "timing/update_s",
    "throughput/tokens_per_s",
    "memory/peak_mb",
    "lr",
}


def _backends():
    return sorted(PluginManager().items["backend"])


@pytest.fixture(params=_backends())
def backend(request):
    cls = get_plugin_manager().items["backend"][request.param].item
    if request.node.get_closest_marker("plans_only"):  # pure plans need no engine: every registered backend
        return cls()
    version = cls.installed_version()
    if version is None:
        pytest.skip(f"{cls.distribution} is not installed in this environment")
    if not cls.version_supported(version):
        pytest.skip(f"{cls.distribution} {version} is outside {cls.supported_versions}")
    return cls()


def test_capability_table_covers_every_canonical_knob(backend):
    table = backend.capability_table()
    assert set(table) == set(canonical_knobs())
    for cap in table.values():
        if cap.support is not Support.HONOURED:
            assert cap.note, f"{cap.knob}: an approximated or rejected knob must say how or what instead"


# Each standard config is planned as written and as for a GPU machine with vLLM rollout (plans are
# pure: validating a GPU plan needs no GPU), so that engine versions without a CPU rollout are
# still validated by their own config code.
VARIANTS = {"as-written": [], "gpu-vllm": ["resources.gpus_per_node=1", "rollout.engine=vllm"]}


@pytest.mark.parametrize("config_file", STANDARD_CONFIGS, ids=lambda p: p.stem)
def test_standard_config_plan_validates_with_the_engine(backend, config_file):
    validated, rejected = [], []
    offline = load_config(config_file, [f"backend={backend.name}"]).is_offline
    for variant, extra in VARIANTS.items():
        if validated or (offline and extra):
            # the GPU variant is a fallback for engines that cannot plan the config on CPU (an offline stage has no
            # rollout)
            break
        config = load_config(config_file, [f"backend={backend.name}", *extra])
        unmet = requirement_unmet(backend, config)
        if unmet:  # declared by the backend's capability table; prepare() must then refuse it
            rejected.append(f"{variant}: {unmet}")
            with pytest.raises(RLBridgeError):
                prepare(config)
            continue
        prepared = prepare(config)
        json.dumps(prepared.plan.to_dict())  # serialisable
        backend.validate(prepared.plan)
        validated.append(variant)
    if not validated:
        pytest.skip(f"{config_file.name} asks for what {backend.name} declares it cannot do: {'; '.join(rejected)}")


RECORDER_MODULE = """
import json, os
from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin

def recorder():
    def reward(inputs):
        with open(os.environ["RLBRIDGE_CONFORMANCE_LOG"], "a") as fh:
            for x in inputs:
                fh.write(json.dumps({"pid": os.getpid(), "prompt": x.prompt, "completion": x.completion,
                                     "completion_ids": x.completion_ids, "answer": x.answer}) + "\\n")
        return [min(x.completion.count(str(x.answer)), len(x.completion_ids)) / max(len(x.completion_ids), 1) for x in inputs]
    return reward

@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("conformance_recorder", recorder, "records what the engine passes to reward plugins")]
"""


@pytest.fixture
def recorder_plugin(tmp_path, monkeypatch):
    """A reward plugin installed as a real distribution with an `rlbridge` entry point, so that engine
    processes (Ray workers included) find it exactly as they would a user's plugin. It logs every
    sample it is called with to a file, with the pid of the process that called it."""
    install_plugin_distribution(tmp_path / "plugin-site", "rlbridge_conformance_plugin", RECORDER_MODULE, monkeypatch)
    log = tmp_path / "reward_calls.jsonl"
    monkeypatch.setenv("RLBRIDGE_CONFORMANCE_LOG", str(log))
    reset_plugin_manager()
    yield log
    reset_plugin_manager()


# eval prompts are 3 digits long, the training ones 4: the recorder tells the engine's eval calls apart
TWO_STEP_EVAL = [
    'data.eval={"type": "generator", "name": "digit_copy", "args": {"num_rows": 4, "repeat": 3}}',
    "data.eval_interval=2",
]


@pytest.mark.engine
def test_two_step_run_calls_the_reward_shim_and_streams_canonical_metrics(backend, recorder_plugin, tmp_path):
    overrides = [
        f"backend={backend.name}",
        f"output_dir={tmp_path}/run",
        "training.steps=2",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "reward=[{name: conformance_recorder}]",
        "resources.gpus_per_node=auto",  # CPU here; the GPU on an e2e-gpu cell
        "model.path=builtin:tiny-bpe",  # a BPE tokenizer: re-encoding decoded text would not give back the engine's ids
        "training.on_nonfinite=warn",  # a NaN must reach the assertion below, not stop the run first
    ]
    # evaluation at the last step, where the engine evaluates: the same run proves the eval seam (CI's Ray
    # cells keep this run and leave the two-run seed test to make compat, compat_matrix/matrix.yaml)
    evaluates = not requirement_unmet(
        backend, load_config(QUICKSTART, [*overrides, *TWO_STEP_EVAL]), "data.eval", "data.eval_interval"
    )
    summary = train(load_config(QUICKSTART, [*overrides, *(TWO_STEP_EVAL if evaluates else [])]), progress=False)
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    if evaluates:
        evals = [json.loads(line) for line in (tmp_path / "run" / "eval_metrics.jsonl").read_text().splitlines()]
        assert evals and all(math.isfinite(e["eval/reward/mean"]) for e in evals), evals
    for row in rows:
        missing = REQUIRED_METRICS - set(row)
        assert not missing, missing
        assert "reward/conformance_recorder/mean" in row
        # non-finite values are written as null and named in "nonfinite" (rlbridge.run.runtime)
        assert "nonfinite" not in row, f"step {row['step']}: non-finite {row['nonfinite']}"
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in row.values()), row
    assert summary["nonfinite_steps"] == []
    # a separate rollout engine (vLLM) gets the updated weights every step, measured at the engine's seam
    if yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["rollout"]["engine"] == "vllm":
        assert all(r.get("weight_sync/bytes", 0) > 0 and r.get("weight_sync/tensors", 0) > 0 for r in rows), rows
    calls = [json.loads(line) for line in recorder_plugin.read_text().splitlines()]
    samples = [x for x in calls if len(x["prompt"]) == 4]
    assert len(samples) == 2 * 2 * 4  # steps x prompts x group
    assert not evaluates or len(calls) > len(samples)  # and the evaluation scored its prompts through the same shim
    if backend.scores_in_engine_workers:  # declared: the engine calls reward plugins in its own processes
        assert os.getpid() not in {x["pid"] for x in samples}
    for x in samples:
        assert x["prompt"] in {d * 4 for d in "0123456789"} and x["answer"] == x["prompt"][0]
        assert isinstance(x["completion"], str) and 1 <= len(x["completion_ids"]) <= 8
    assert_engine_token_ids(samples)
    patches = tmp_path / "run" / "patches.json"
    if backend.scores_in_engine_workers and patches.exists():
        # every engine process that applied patches reported them; some ran outside the driver
        report = json.loads(patches.read_text())
        applied_in = {p["pid"] for entry in report["by_patch"].values() for p in entry["applied_in"]}
        if applied_in:  # (on a GPU no CPU enablement applies)
            assert len(report["processes"]) >= 2 and applied_in - {os.getpid()}, report["by_patch"]


def assert_engine_token_ids(samples: list[dict]) -> None:
    """The shim handed plugins the ids the engine sampled, not a re-encoding of the decoded text: a
    random policy over a BPE vocabulary samples splits its tokenizer would never write (e.g. '1' '1'
    where it writes '11'), so if every sample's ids equal encode(decode(ids)), the shim re-encoded."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from rlbridge.contract.models import builtin_model_dir

    model = builtin_model_dir("tiny-bpe")
    for tokenizer in (AutoTokenizer.from_pretrained(model), PreTrainedTokenizerFast.from_pretrained(model)):
        reencoded = [
            tokenizer(tokenizer.decode(x["completion_ids"]), add_special_tokens=False)["input_ids"] for x in samples
        ]
        differ = sum(r != x["completion_ids"] for r, x in zip(reencoded, samples))
        assert differ > 0, (
            f"all {len(samples)} samples' completion_ids equal encode(decode(ids)) ({type(tokenizer).__name__}): "
            "re-encoded text?"
        )


@pytest.mark.engine
def test_environment_plugin_runs_through_the_engine_multi_turn_machinery(backend, tmp_path):
    overrides = [
        f"backend={backend.name}",
        f"output_dir={tmp_path}/run",
        "training.steps=2",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "rollout.max_prompt_tokens=8",
        "reward=[]",
        "environment={name: digit_turns, args: {turns: 2}, max_turns: 2}",
        "resources.gpus_per_node=auto",
    ]
    config = load_config(QUICKSTART, overrides)
    unmet = requirement_unmet(backend, config, "environment")
    if unmet:
        pytest.skip(
            f"{backend.name} {backend.installed_version()} declares it does not run environment plugins: {unmet}"
        )
    summary = train(config, progress=False)
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all("reward/digit_turns/mean" in r and 0.0 <= r["reward/mean"] <= 1.0 for r in rows)
    # one reward per episode, reported by the adapter's multi-turn driver inside the engine's rollout
    events = [json.loads(line) for line in (tmp_path / "run" / f"{backend.name}_events.jsonl").read_text().splitlines()]
    episodes = [e for e in events if e["kind"] == "reward_sample"]
    assert len(episodes) == 2 * 2 * 4  # steps x prompts x group
    assert all(0.0 <= e["total"] <= 1.0 for e in episodes)


@pytest.mark.engine
def test_checkpoints_are_reported_and_a_resumed_run_continues(backend, tmp_path):
    from rlbridge import hookimpl

    saved = []

    class Saves:
        @hookimpl
        def rlbridge_checkpoint_saved(self, step, path):
            saved.append(step)

    plugins = PluginManager()
    plugins.register(Saves(), "saves")
    base = [
        f"backend={backend.name}",
        f"output_dir={tmp_path}/run",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "checkpoint.interval=1",
        "resources.gpus_per_node=auto",
    ]
    resumed = load_config(QUICKSTART, [*base, "training.steps=3", "checkpoint.resume=true"])
    unmet = requirement_unmet(backend, resumed, "checkpoint.interval", "checkpoint.resume")
    if unmet:
        pytest.skip(f"{backend.name} declares it does not checkpoint or resume: {unmet}")
    train(load_config(QUICKSTART, [*base, "training.steps=2"]), plugins, progress=False)
    assert saved == [1, 2]
    summary = train(resumed, plugins, progress=False)
    assert summary["status"] == "completed"
    assert saved == [1, 2, 3]  # the resumed run saved step 3 only
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # it went on from step 2


def _ray_workers() -> list[tuple[int, str, int]]:
    """(pid, name, rss kB) of this process's Ray actor processes ('ray::Name...' in ps)."""
    from rlbridge.engine.lifeline import descendants

    out = []
    for pid in descendants():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                name = fh.read().split(b"\0")[0].decode(errors="replace")
            with open(f"/proc/{pid}/statm") as fh:
                rss = int(fh.read().split()[1]) * 4
        except (OSError, ValueError, IndexError):
            continue
        if name.startswith("ray::") and not name.startswith(("ray::IDLE", "ray::_")):
            out.append((pid, name, rss))
    return out


@pytest.mark.engine
def test_a_killed_engine_worker_fails_the_run_naming_it_and_leaves_no_process(backend, tmp_path):
    """SIGKILL of the engine's biggest Ray worker (the policy's) after the first step: the run fails,
    summary.json names the process, its first error lines and a log that exists, and nothing the
    run started is left running."""
    import signal
    import threading
    import time

    from rlbridge.engine.lifeline import _alive, descendants

    if not backend.scores_in_engine_workers:  # declared by the backend
        pytest.skip(f"{backend.name} trains in one process: there is no engine worker to lose")
    before = set(descendants())
    run = tmp_path / "run"
    overrides = [
        f"backend={backend.name}",
        f"output_dir={run}",
        "training.steps=40",  # the kill lands after step 1: a run of 0.1 s steps (verl 0.5) must not end first
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "resources.gpus_per_node=auto",
    ]
    killed: dict = {}

    def kill_after_first_step():
        deadline = time.time() + 900
        while time.time() < deadline:
            metrics = run / "metrics.jsonl"
            if metrics.exists() and metrics.read_text().strip():
                workers = _ray_workers()
                if workers:
                    pid, name, _ = max(workers, key=lambda w: w[2])
                    killed.update(pid=pid, name=name)
                    os.kill(pid, signal.SIGKILL)
                    break
            time.sleep(0.2)
        if killed and not done.wait(300):  # an engine that hangs on a dead worker must not hang the suite
            killed["hung"] = True
            import _thread

            _thread.interrupt_main()

    done = threading.Event()
    killer = threading.Thread(target=kill_after_first_step, daemon=True)
    killer.start()
    try:
        with pytest.raises(BaseException):  # noqa: B017 - any failure, the watchdog's KeyboardInterrupt included
            train(load_config(QUICKSTART, overrides), progress=False)
    finally:
        done.set()
    killer.join(timeout=5)
    assert killed, "no Ray worker was found to kill"
    assert not killed.get("hung"), f"the run did not fail within 300 s of the death of {killed}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed"
    failure = summary.get("failure")
    assert failure, summary.get("error")
    actor = killed["name"].split("::", 1)[1].split(".")[0].split()[0]
    assert str(killed["pid"]) in failure["process"] or actor in failure["process"], (killed, failure)
    assert failure["error"] and os.path.exists(failure["log"]), failure
    # its cause (rlbridge.diagnosis.causes): a dead Ray worker, with Ray's account and a hint naming the restart knob
    assert failure["kind"] in ("ray_actor_died", "vllm_engine_died") and failure["retryable"], failure
    assert failure["role"] and "training.max_restarts" in failure["hint"], failure
    deadline = time.time() + 30
    while time.time() < deadline and any(_alive(p) for p in set(descendants()) - before):
        time.sleep(0.5)
    left = {p for p in set(descendants()) - before if _alive(p)}
    assert not left, f"processes of the run still running: {left}"


def _processes_of(run_dir) -> set[int]:
    """Live processes that belong to the run in `run_dir`: each engine process has the run directory
    in its environment (the events file and the rest), and Ray workers inherit it from the raylet."""
    from rlbridge.engine.lifeline import _alive

    needle = str(run_dir).encode()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if needle in fh.read():
                        found.add(int(entry))
            except OSError:
                continue
    return {p for p in found if _alive(p)}


KILL_STEPS = 4  # checkpoints at 2 and 4; killed once step 3 is recorded, while step 4 runs
# what must be identical between an uninterrupted run and a killed-then-resumed one where the
# backend declares resume_reproduces_metrics (timings may differ)
REPRODUCED = ("reward/mean", "reward/std", "loss/policy", "grad_norm", "entropy", "lr", "response_length/mean")


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only on Ray engines (several minutes); TRL's runs in the plain test phase
def test_sigkill_of_the_whole_run_mid_training_then_resume_continues(backend, tmp_path):
    """`rlbridge train` and every process of its run (engine, Ray cluster, workers, vLLM) get SIGKILL
    while step 3 of 4 trains, as on a node failure: nothing is left running and nobody marks the
    run. `rlbridge train CONFIG --resume` then names the previous run as killed, continues from the
    last complete checkpoint (step 2) and ends at step 4: each step once, steps 1-2 kept as the
    killed run wrote them, steps 3-4 trained again on the same prompts in the same order, the
    learning-rate schedule where it was, and a finite reward at every step. Where the backend
    declares resume_reproduces_metrics (TRL on CPU), the metrics equal an uninterrupted run's."""
    import signal
    import subprocess
    import sys
    import time

    from rlbridge.engine.lifeline import _alive, descendants

    if not backend.installed_version():
        pytest.skip(f"{backend.name} is not installed here")
    data = tmp_path / "prompts.jsonl"  # 16 distinct prompts: a batch of 2 is never a batch seen before
    data.write_text(
        "".join(
            json.dumps({"prompt": str(i % 10) * (4 if i < 10 else 3), "answer": str(i % 10)}) + "\n" for i in range(16)
        )
    )
    overrides = [
        f"backend={backend.name}",
        f"training.steps={KILL_STEPS}",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "checkpoint.interval=2",
        "training.lr_schedule=cosine",
        "resources.gpus_per_node=auto",
        f"data.train={{type: jsonl, path: {data}}}",
        "telemetry.samples_per_step=16",
        # every step lasts over a second (a reward of weight 0 that sleeps): step 4 cannot end before
        # the test, which sees step 3's row up to ~0.3 s after the engine logs it, kills the run
        "reward=[{name: digit_match}, {native: trl, function: 'rlbridge.testing.slow_reward:pause', weight: 0.0, "
        "args: {seconds: 1.0}}]",
        f"engine_env={sys.prefix}",  # the engine in its own process tree, as from a user's shell
    ]
    config = load_config(QUICKSTART, overrides)
    unmet = requirement_unmet(backend, config, "checkpoint.interval", "checkpoint.resume", "training.lr_schedule")
    if unmet:
        pytest.skip(f"{backend.name} declares it cannot do this: {unmet}")

    def start(run, *extra):
        args = [a for o in overrides for a in ("--set", o)]
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rlbridge",
                "train",
                str(QUICKSTART),
                "--no-progress",
                *args,
                "--set",
                f"output_dir={run}",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def rows(run, name="metrics.jsonl"):
        path = run / name
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def prompts(run):
        by_step: dict[int, list[str]] = {}
        for row in rows(run, "samples.jsonl"):
            by_step.setdefault(row["step"], []).append(row["prompt"])
        return {step: sorted(set(p)) for step, p in by_step.items()}

    run = tmp_path / "killed"
    proc = start(run)
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None and len(rows(run)) < 3:
        time.sleep(0.05)
    if proc.poll() is not None:
        pytest.fail(f"the run ended (exit {proc.returncode}) before it could be killed: {proc.stdout.read()[-3000:]}")
    assert len(rows(run)) == 3, f"step 3 not reached in 900 s: {rows(run)}"
    # the whole tree, at once: the user's process, its descendants, every process of the run
    tree = {proc.pid, *descendants(proc.pid), *_processes_of(run)}
    for _ in range(2):  # a second pass for what was forked while the first one ran
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.3)
        tree |= _processes_of(run)
    proc.wait()
    killed_at = time.time()
    while time.time() - killed_at < 15 and any(_alive(p) for p in tree | _processes_of(run)):
        time.sleep(0.2)
    left = {p for p in tree | _processes_of(run) if _alive(p)}
    assert not left, f"processes of the killed run still running: {left}"
    killed_rows, killed_prompts = rows(run), prompts(run)
    assert [r["step"] for r in killed_rows] == [1, 2, 3]
    assert not (run / "summary.json").exists()

    resumed = start(run, "--resume")
    out, _ = resumed.communicate(timeout=1200)
    assert resumed.returncode == 0, out[-4000:]
    assert "was killed" in out, out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["previous_run"]["status"] == "killed", summary
    final = rows(run)
    assert [r["step"] for r in final] == list(range(1, KILL_STEPS + 1)), final  # each step once, none lost
    assert final[:2] == killed_rows[:2], "steps 1-2 (before the checkpoint) must be kept as the killed run wrote them"
    assert final[2]["timing/step_s"] != killed_rows[2]["timing/step_s"], (
        "step 3 must be trained again after the checkpoint"
    )
    # data order: the resumed run trains step 3 on the prompts the killed run drew for step 3 (the
    # data loader's state came back); a data loader started over would draw step 1's again
    final_prompts = prompts(run)
    assert killed_prompts[3] != killed_prompts[1], killed_prompts
    assert final_prompts[3] == killed_prompts[3], (final_prompts, killed_prompts)
    assert not set(final_prompts[4]) & (set(final_prompts[1]) | set(final_prompts[2]) | set(final_prompts[3])), (
        final_prompts
    )
    # the schedule went on from step 2 (cosine: step 3's rate is below step 1's), and so did the curve
    assert final[2]["lr"] == pytest.approx(killed_rows[2]["lr"], rel=1e-6) and final[2]["lr"] < final[0]["lr"], final
    assert all(isinstance(r.get("reward/mean"), (int, float)) and math.isfinite(r["reward/mean"]) for r in final), final
    ended = time.time()
    while time.time() - ended < 15 and _processes_of(run):
        time.sleep(0.2)
    assert not _processes_of(run), "processes of the resumed run still running 15 s after it ended"
    if backend.resume_reproduces_metrics:
        reference = tmp_path / "uninterrupted"
        ref = start(reference)
        out, _ = ref.communicate(timeout=1200)
        assert ref.returncode == 0, out[-3000:]
        for got, want in zip(final, rows(reference), strict=True):
            for key in REPRODUCED:
                assert got.get(key) == want.get(key), (got["step"], key, got.get(key), want.get(key))


CHAOS_STEPS = 6  # a kill or stop after step 1-3 leaves 3 or more: a run of 0.1 s steps must not end first


@pytest.mark.engine
@pytest.mark.matrix_only  # several minutes on a Ray engine (make compat); TRL's restart test is tests/test_faults.py
def test_chaos_a_random_process_of_the_run_killed_at_a_random_step_is_restarted_and_the_run_completes(
    backend, tmp_path
):
    """With training.max_restarts=2, a killer SIGKILLs one process of the run's tree chosen at random
    among those its work runs in (the engine process, a Ray actor or task worker, the vLLM engine)
    once a step chosen at random is written: the run restarts by itself from its last complete
    checkpoint, ends with steps 1..6 once each, and summary.json lists the restart with its cause."""
    import random
    import signal
    import sys
    import threading
    import time

    from rlbridge.engine.lifeline import descendants

    if not backend.scores_in_engine_workers:
        pytest.skip(f"{backend.name} trains in one process: tests/test_faults.py kills and restarts it")
    seed = int(os.environ.get("RLBRIDGE_CHAOS_SEED", time.time()))
    rng = random.Random(seed)
    kill_after = rng.choice([1, 2, 3])
    run = tmp_path / "run"
    overrides = [
        f"backend={backend.name}",
        f"output_dir={run}",
        f"training.steps={CHAOS_STEPS}",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "resources.gpus_per_node=auto",
        "checkpoint.interval=1",
        "training.max_restarts=2",
        "training.restart_backoff_s=1",
        "training.hang_min_s=180",
        "training.hang_first_step_s=900",
    ]
    killed: dict = {}

    def kill_one():
        deadline = time.time() + 1200
        metrics = run / "metrics.jsonl"
        while time.time() < deadline and not done.is_set():
            if metrics.exists() and len(metrics.read_text().splitlines()) >= kill_after:
                # the processes the run's work is in: the engine process, Ray's actors and task workers, vLLM
                # (not those the engine needs only while it starts: killing one later changes nothing)
                spared = tuple(f"ray::{name}".encode() for name in ("IDLE", *backend.startup_only_actors))
                victims = sorted(
                    p
                    for p in descendants()
                    if _cmdline(p).startswith((b"ray::", b"VLLM::"))
                    and not _cmdline(p).startswith(spared)
                    or b"rlbridge.engine.child" in _cmdline(p)
                )
                if victims:
                    pid = rng.choice(victims)
                    killed.update(pid=pid, cmd=_cmdline(pid)[:200].decode(errors="replace"), after_step=kill_after)
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.1)

    done = threading.Event()
    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    try:
        summary = train(load_config(QUICKSTART, overrides), progress=False)
    finally:
        done.set()
        killer.join(timeout=5)
    assert killed, f"nothing was killed (seed {seed})"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, CHAOS_STEPS + 1)), (seed, killed, rows)
    assert summary["status"] == "completed" and summary["engine_python"] == sys.executable
    assert summary["restarts"], f"no restart after killing {killed} (seed {seed})"
    for restart in summary["restarts"]:
        assert restart["kind"] in (
            "engine_process_died",
            "ray_actor_died",
            "vllm_engine_died",
            "host_oom",
            "collective_timeout",
            "hang",
        ), restart
    print(f"chaos seed {seed}: killed {killed}; restarts {summary['restarts']}")


@pytest.mark.engine
@pytest.mark.matrix_only  # minutes on a Ray engine (make compat); TRL's hang tests are tests/test_faults.py
def test_a_stopped_ray_actor_is_a_hang_named_with_its_stacks_and_the_run_restarts(backend, tmp_path):
    """SIGSTOP of the engine's biggest Ray actor (the policy's) once step 2 is written: nothing fails,
    the run just stops. The hang watchdog fires within its bound (2 x the longest step interval, at
    least 20 s), writes every process's stack (the stopped actor's frames included, read from outside
    by py-spy), names the stopped actor with its role; with training.max_restarts=1 the run restarts
    from its last checkpoint and ends with steps 1..6 once each, the hang listed in summary.json."""
    import signal
    import threading
    import time
    from pathlib import Path

    if not backend.scores_in_engine_workers:
        pytest.skip(f"{backend.name} trains in one process: tests/test_faults.py stalls its reward and stops a rank")
    run = tmp_path / "run"
    overrides = [
        f"backend={backend.name}",
        f"output_dir={run}",
        f"training.steps={CHAOS_STEPS}",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "resources.gpus_per_node=auto",
        "checkpoint.interval=1",
        "training.max_restarts=1",
        "training.restart_backoff_s=1",
        "training.hang_factor=2",
        "training.hang_min_s=20",
        "training.hang_first_step_s=900",
    ]
    stopped: dict = {}

    def stop_one():
        metrics = run / "metrics.jsonl"
        deadline = time.time() + 900
        while time.time() < deadline and not done.is_set():
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                workers = _ray_workers()
                if workers:
                    pid, name, _ = max(workers, key=lambda w: w[2])
                    os.kill(pid, signal.SIGSTOP)
                    stopped.update(pid=pid, name=name, at=time.time())
                return
            time.sleep(0.1)

    done = threading.Event()
    stopper = threading.Thread(target=stop_one, daemon=True)
    stopper.start()
    try:
        summary = train(load_config(QUICKSTART, overrides), progress=False)
    finally:
        done.set()
        stopper.join(timeout=5)
        if stopped:  # whatever happened, the stopped actor does not outlive the test
            try:
                os.kill(stopped["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert stopped, "no Ray actor was found to stop"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, CHAOS_STEPS + 1)), (stopped, rows)
    assert summary["status"] == "completed", summary
    [restart] = summary["restarts"]
    assert restart["kind"] == "hang", (stopped, restart)
    # the stuck process is the stopped actor, named with its role and pid
    assert f"pid {stopped['pid']}" in restart["process"] and restart["role"].startswith(("Ray actor", "vLLM engine")), (
        stopped,
        restart,
    )
    actor = stopped["name"].split("::", 1)[1].split(".")[0].split()[0]
    assert actor in restart["role"], (stopped, restart)
    roles = backend.actor_roles.get(actor)
    assert not roles or restart["role"].endswith(f"({'/'.join(roles)})"), (
        restart,
        backend.actor_roles,
    )  # which roles it plays
    assert "stopped (SIGSTOP)" in restart["evidence"], restart
    # within its bound, and the bound derived from the run's own steps (not the first-step floor)
    assert "2 x the longest step interval so far" in restart["evidence"] and 20 <= restart["bound_s"] < 900, restart
    assert restart["waited_s"] <= restart["bound_s"] + 2.0, restart  # 0.5 s polls
    dumped = json.loads(Path(restart["stacks"]).with_suffix(".json").read_text())
    assert dumped["stuck"]["pid"] == stopped["pid"] and dumped["stuck"]["stopped"], dumped["stuck"]
    [victim] = [p for p in dumped["processes"] if p["pid"] == stopped["pid"]]
    assert victim["state"] in ("T", "t") and any(t["frames"] for t in victim["threads"]), (
        victim
    )  # py-spy read it while stopped
    roles = {p["role"] for p in dumped["processes"]}
    assert "trainer (engine process)" in roles, roles
    text = Path(restart["stacks"]).read_text()
    assert f"stuck: {restart['process']}" in text and "(stopped: SIGSTOP)" in text, text[:2000]
    from rlbridge.diagnosis.doctor import explain

    doctor = explain(run)  # rlbridge doctor RUN_DIR
    # after the last step written before the stop: 2, or later where steps take less than the stopper's poll
    line = f"restart 1 after step {restart['after_step']}: hang in"
    assert 2 <= restart["after_step"] < CHAOS_STEPS and any(
        entry.startswith(line) and restart["stacks"] in entry for entry in doctor
    ), doctor
    print(f"stopped {stopped}; restart {restart}")


# a reward plugin that stops answering once the run has written `after_steps` rows (a reward server
# that stopped answering), wherever the engine scores: a Ray actor's worker pool, the vLLM actor
STALLS_AFTER = """
import time
from pathlib import Path
from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin

def stalls_after(metrics: str, after_steps: int = 2):
    def reward(inputs):
        path = Path(metrics)
        while path.exists() and len(path.read_text().splitlines()) >= after_steps:
            time.sleep(3600)
        return [0.5] * len(inputs)
    return reward

@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("stalls_after", stalls_after, "stops answering once the run has written N steps")]
"""


@pytest.mark.engine
@pytest.mark.matrix_only  # minutes on a Ray engine (make compat); TRL's is tests/test_faults.py
def test_a_reward_that_never_returns_inside_a_ray_engine_is_a_hang_named_with_the_plugin_frame(backend, tmp_path):
    """A reward plugin stops answering in step 3 (rollout_workers.timeout_s far away), the engine in this
    process: the watchdog fires within its bound, names the reward worker under the engine's Ray actor
    and the plugin's frame, and the run fails (training.on_hang: fail) leaving no reward worker."""
    import time
    from pathlib import Path

    from rlbridge.diagnosis import stacks

    if not backend.scores_in_engine_workers:
        pytest.skip(f"{backend.name} trains in one process: tests/test_faults.py stalls its reward")
    plugin = tmp_path / "stalls_after_plugin.py"
    plugin.write_text(STALLS_AFTER)
    run = tmp_path / "run"
    overrides = [
        f"backend={backend.name}",
        f"output_dir={run}",
        f"training.steps={CHAOS_STEPS}",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
        "resources.gpus_per_node=auto",
        f"plugins=[{plugin}]",
        f"reward=[{{name: digit_match}}, {{name: stalls_after, args: {{metrics: '{run / 'metrics.jsonl'}'}}}}]",
        "rollout_workers.timeout_s=600",
        "training.on_hang=fail",
        "training.hang_factor=2",
        "training.hang_min_s=20",
        "training.hang_first_step_s=900",
    ]
    with pytest.raises(BaseException, match="hang"):  # noqa: B017 - HangError
        train(load_config(QUICKSTART, overrides), progress=False)
    summary = json.loads((run / "summary.json").read_text())
    failure = summary["failure"]
    # the stall starts once 2 rows are written; an engine may already be scoring the next step then
    assert summary["status"] == "failed" and 2 <= summary["steps"] < CHAOS_STEPS, summary
    assert failure["kind"] == "hang" and failure["role"] == "reward worker", failure
    assert "stalls_after.<locals>.reward" in failure["frame"] and str(plugin) in failure["frame"], failure
    assert failure["waited_s"] <= failure["bound_s"] + 2.0 and 20 <= failure["bound_s"] < 900, failure
    assert "rollout_workers.timeout_s=60 (now 600)" in failure["hint"], failure
    dumped = json.loads(Path(failure["stacks"]).with_suffix(".json").read_text())
    [worker] = [p for p in dumped["processes"] if p["pid"] == dumped["stuck"]["pid"]]
    parents = {p["pid"]: p for p in dumped["processes"]}
    owner = parents.get(worker["ppid"], {}).get("role", "")
    assert owner.startswith(("Ray actor", "vLLM engine")), (owner, worker)  # the pool under the engine's Ray actor
    deadline = time.time() + 30
    while time.time() < deadline and stacks.tree(worker["pid"]):
        time.sleep(0.5)
    assert not stacks.tree(worker["pid"]), "the stalled reward worker outlived the run"
    print(f"hang: {failure['evidence']}; reward worker's parent {owner}")


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ")
    except OSError:
        return b""
