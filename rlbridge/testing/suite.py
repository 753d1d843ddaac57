"""The conformance suite every backend must pass (like SQLAlchemy's dialect compliance suite).

It runs against each registered backend whose engine is installed in this environment (the others
are skipped, saying why), so `rlbridge compat run` can run it in each engine environment:

* translate: the plan of every standard config validates with the engine's own config code; the
  capability table covers every canonical knob; every rejected knob errors before anything starts.
* e2e (marked `engine`): a 2-step run through the engine's own trainer calls the rlbridge reward
  shim with the right inputs and produces finite canonical metrics; checkpoints are reported through
  the checkpoint hook and a resumed run goes on from the last one; where the backend runs environment
  plugins, a 2-step run drives one through the engine's own multi-turn machinery.
"""

import importlib
import json
import math
import os
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from rlbridge.contract.backend import Support, canonical_knobs, knob_default
from rlbridge.contract.config import RunConfig
from rlbridge.errors import CapabilityError, RLBridgeError
from rlbridge.run.loading import load_config
from rlbridge.contract.registry import PluginManager, get_plugin_manager, reset_plugin_manager
from rlbridge.run.runner import prepare, train

REPO = Path(__file__).resolve().parents[2]
STANDARD_CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
REQUIRED_METRICS = {
    "reward/mean", "reward/std", "loss/policy", "grad_norm", "response_length/mean", "timing/step_s",
    "timing/generate_s", "timing/update_s", "throughput/tokens_per_s", "memory/peak_mb", "lr",
}


def _backends():
    return sorted(PluginManager().items["backend"])


@pytest.fixture(params=_backends())
def backend(request):
    cls = get_plugin_manager().items["backend"][request.param].item
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
    for variant, extra in VARIANTS.items():
        if validated:
            break  # the GPU variant is a fallback for engines that cannot plan the config on CPU
        try:
            prepared = prepare(load_config(config_file, [f"backend={backend.name}", *extra]))
        except CapabilityError as exc:
            rejected.append(f"{variant}: {exc}")
            continue
        json.dumps(prepared.plan.to_dict())  # serialisable
        backend.validate(prepared.plan)
        validated.append(variant)
    if not validated:
        pytest.skip(f"{config_file.name} asks for what {backend.name} rejects: {'; '.join(rejected)}")


def _non_default(knob: str):
    """A valid value different from the knob's default, derived from its type."""
    model = RunConfig
    parts = knob.split(".")
    for part in parts[:-1]:
        model = model.model_fields[part].annotation
    annotation = model.model_fields[parts[-1]].annotation
    default = knob_default(knob)
    args = typing.get_args(annotation)
    if knob == "environment":
        return {"name": "any", "max_turns": 2}
    if knob == "reward":
        return [{"name": "digit_match", "weight": 2.0}]
    for candidate in (annotation, *args):
        if candidate is bool:
            return not default
        if candidate is int:
            return (default or 0) + 2
        if candidate is float:
            return (default or 0.0) + 0.5
        if typing.get_origin(candidate) is typing.Literal:
            return next(v for v in typing.get_args(candidate) if v != default)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return None
    if typing.get_origin(annotation) is dict or annotation is dict:
        return {"x": 1}
    return "x"


def test_every_rejected_knob_errors_before_anything_starts(backend, tmp_path):
    rejected = [cap.knob for cap in backend.capabilities() if cap.support is Support.REJECTED]
    for knob in rejected:
        value = _non_default(knob)
        overrides = [f"backend={backend.name}", f"output_dir={tmp_path}/out", f"{knob}={json.dumps(value)}"]
        with pytest.raises(RLBridgeError) as info:
            prepare(load_config(REPO / "configs" / "quickstart.yaml", overrides))
        assert knob in str(info.value) or knob.split(".")[0] in str(info.value), str(info.value)
        assert not (tmp_path / "out").exists()


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
    site = tmp_path / "plugin-site"
    dist = site / "rlbridge_conformance_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlbridge-conformance-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[rlbridge]\nconformance = rlbridge_conformance_plugin\n")
    (site / "rlbridge_conformance_plugin.py").write_text(RECORDER_MODULE)
    log = tmp_path / "reward_calls.jsonl"
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("RLBRIDGE_CONFORMANCE_LOG", str(log))
    importlib.invalidate_caches()
    reset_plugin_manager()
    yield log
    reset_plugin_manager()


@pytest.mark.engine
def test_two_step_run_calls_the_reward_shim_and_streams_canonical_metrics(backend, recorder_plugin, tmp_path):
    overrides = [
        f"backend={backend.name}", f"output_dir={tmp_path}/run", "training.steps=2", "training.batch_size=2",
        "algorithm.group_size=4", "rollout.max_new_tokens=8", "reward=[{name: conformance_recorder}]",
        "resources.gpus_per_node=auto",  # CPU here; the GPU on an e2e-gpu cell
    ]
    summary = train(load_config(REPO / "configs" / "quickstart.yaml", overrides), progress=False)
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        missing = REQUIRED_METRICS - set(row)
        assert not missing, missing
        assert "reward/conformance_recorder/mean" in row
        assert all(math.isfinite(v) for v in row.values())
    samples = [json.loads(line) for line in recorder_plugin.read_text().splitlines()]
    assert len(samples) == 2 * 2 * 4  # steps x prompts x group
    if backend.name != "trl":  # the engine called the plugin in its own worker processes
        assert os.getpid() not in {x["pid"] for x in samples}
    for x in samples:
        assert x["prompt"] in {d * 4 for d in "0123456789"} and x["answer"] == x["prompt"][0]
        assert isinstance(x["completion"], str) and 1 <= len(x["completion_ids"]) <= 8


@pytest.mark.engine
def test_environment_plugin_runs_through_the_engine_multi_turn_machinery(backend, tmp_path):
    overrides = [
        f"backend={backend.name}", f"output_dir={tmp_path}/run", "training.steps=2", "training.batch_size=2",
        "algorithm.group_size=4", "rollout.max_new_tokens=8", "rollout.max_prompt_tokens=8", "reward=[]",
        "environment={name: digit_turns, args: {turns: 2}, max_turns: 2}", "resources.gpus_per_node=auto",
    ]
    config = load_config(REPO / "configs" / "quickstart.yaml", overrides)
    try:
        prepare(config)
    except CapabilityError as exc:
        pytest.skip(f"{backend.name} {backend.installed_version()} does not run environment plugins: {exc}")
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
        f"backend={backend.name}", f"output_dir={tmp_path}/run", "training.batch_size=2", "algorithm.group_size=4",
        "rollout.max_new_tokens=8", "checkpoint.interval=1", "resources.gpus_per_node=auto",
    ]
    train(load_config(REPO / "configs" / "quickstart.yaml", [*base, "training.steps=2"]), plugins, progress=False)
    assert saved == [1, 2]
    summary = train(load_config(REPO / "configs" / "quickstart.yaml", [*base, "training.steps=3", "checkpoint.resume=true"]),
                    plugins, progress=False)
    assert summary["status"] == "completed"
    assert saved == [1, 2, 3]  # the resumed run saved step 3 only
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # it went on from step 2
