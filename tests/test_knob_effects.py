"""Issue 10's reproductions: each gives the right native value or a one-line error naming the field.

The knob-by-knob effect test itself is in the conformance suite (rlbridge.testing.effects); these are
the cases users hit, checked by name: backend_options that contradict a canonical knob, cross-field
checks the core does once for every backend, plugin arguments checked at plan time, and the generated
knob page."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import QUICKSTART, REPO, run_cli
from rlbridge.contract.registry import PluginManager
from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare


# every registered backend, found through the `rlbridge` entry points
BACKENDS = sorted(PluginManager().items["backend"])


def _prepare(*overrides: str):
    return prepare(load_config(QUICKSTART, ["resources.gpus_per_node=0", *overrides]))


def _settings(*overrides: str):
    prepared = _prepare(*overrides)
    return prepared.backend.native_settings(prepared.plan)


# ---- backend_options may not touch what a canonical knob owns ----


@pytest.mark.parametrize(
    "option, knob",
    [
        ("model_init_kwargs.dtype=float32", "model.dtype"),
        ("bf16=true", "model.dtype"),
        ("data_seed=5", "training.seed"),
        ("save_strategy=no", "checkpoint.interval"),
        ("generation_kwargs.top_k=3", "rollout.top_k"),
        ("'generation_kwargs={temperature: 0.1}'", "rollout.temperature"),
        ("eval_strategy=steps", "data.eval"),
    ],
)
def test_trl_backend_options_naming_a_knob_are_refused(option, knob):
    with pytest.raises(ConfigError) as info:
        _prepare("backend=trl", f"backend_options.trl.{option.strip(chr(39))}")
    assert knob in str(info.value) and "backend_options.trl." in str(info.value)


def test_trl_logging_steps_is_rlbridges():
    with pytest.raises(ConfigError, match="one metrics.jsonl row per canonical step"):
        _prepare("backend=trl", "backend_options.trl.logging_steps=3")


@pytest.mark.parametrize(
    "option, knob",
    [
        ("data.seed=5", "training.seed"),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1", "training.warmup_steps"),
        ("actor_rollout_ref.actor.optim.warmup_style=cosine", "training.lr_schedule"),
        ("actor_rollout_ref.rollout.response_length=9", "rollout.max_new_tokens"),
        ("actor_rollout_ref.actor.fsdp_config.model_dtype=bf16", "model.dtype"),
        ("actor_rollout_ref.rollout.do_sample=false", "rollout.temperature"),
        ("+actor_rollout_ref.rollout.seed=3", "training.seed"),
    ],
)
def test_verl_backend_options_naming_a_knob_are_refused(option, knob):
    with pytest.raises(ConfigError) as info:
        _prepare("backend=verl", f"backend_options.verl.{option}")
    assert knob in str(info.value)


def test_verl_dynamic_batching_is_not_a_backdoor():
    with pytest.raises(ConfigError, match="backend_options.verl.actor_rollout_ref.actor.use_dynamic_bsz"):
        _prepare("backend=verl", "backend_options.verl.actor_rollout_ref.actor.use_dynamic_bsz=true")


@pytest.mark.parametrize(
    "option, knob",
    [
        ("algo.kl.use_loss=true", "algorithm.kl"),
        ("actor.loss_agg_mode=seq-mean-token-mean", "algorithm.loss_aggregation"),
        ("algo.advantage.no_std_norm=true", "algorithm.advantage_normalization"),
        ("ckpt.save_steps=3", "checkpoint.interval"),
        ("ckpt.load_enable=true", "checkpoint.resume"),
        ("data.apply_chat_template=true", "model.use_chat_template"),
        ("'algo={kl: {init_coef: 0.5}}'", "algorithm.kl_coef"),  # nested: the same key as algo.kl.init_coef
        ("'{\"--train.seed\": 3}'", "training.seed"),  # a leading -- is the same key
    ],
)
def test_openrlhf_backend_options_naming_a_knob_are_refused(option, knob):
    option = option.strip("'")
    override = f"backend_options.openrlhf={option}" if option.startswith("{") else f"backend_options.openrlhf.{option}"
    with pytest.raises(ConfigError) as info:
        _prepare("backend=openrlhf", override)
    assert knob in str(info.value)


def test_openrlhf_flat_spelling_is_the_same_key_on_old_versions():
    # 0.10.1 spells --algo.kl.init_coef as --init_kl_coef: the flat name is the knob's key too
    with pytest.raises(ConfigError, match="algorithm.kl_coef"):
        _prepare("backend=openrlhf", "engine_version=0.10.1", "backend_options.openrlhf={init_kl_coef: 0.5}")


def test_openrlhf_nested_options_become_cli_flags_not_dict_strings():
    prepared = _prepare("backend=openrlhf", "backend_options.openrlhf={vllm: {enable_prefix_caching: true}}")
    argv = prepared.plan.native["args"]
    assert "--vllm.enable_prefix_caching" in argv
    assert not any("{'" in a for a in argv)  # never a Python dict string
    old = _prepare(
        "backend=openrlhf", "engine_version=0.10.1", "backend_options.openrlhf={vllm: {enable_prefix_caching: true}}"
    )
    assert "--vllm.enable_prefix_caching" in old.plan.native["args"]  # no flat alias known: passed as written


# ---- cross-field checks in the core, the same on every backend ----


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "overrides, field",
    [
        (["algorithm.clip_low=1.5"], "clip_low"),
        (["algorithm.clip_high=0.1"], "clip_high"),
        (["resources.gpus_per_node=-1"], "gpus_per_node"),
        (["data.train={type: jsonl, path: x.jsonl, split: test}"], "split"),
        (["model.chat_template='{{ x }}'"], "use_chat_template"),
        (["algorithm.name=dr_grpo", "algorithm.loss_aggregation=token_mean"], "loss_aggregation"),
        (["data.eval_interval=5"], "eval_interval"),
        (["algorithm.name=dpo"], "algorithm.name"),
    ],
)
def test_core_cross_field_checks(backend, overrides, field):
    with pytest.raises(ConfigError) as info:
        _prepare(f"backend={backend}", *overrides)
    assert field in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mini_batch_must_hold_whole_groups_for_every_algorithm(backend):
    # verl counts mini batches in prompts: 2 samples of a group of 4 was ppo_mini_batch_size 0
    with pytest.raises(ConfigError, match="training.mini_batch_size"):
        _prepare(f"backend={backend}", "algorithm.name=ppo", "algorithm.group_size=4", "training.mini_batch_size=2")


@pytest.mark.parametrize("backend", BACKENDS)  # the core's check of the training layout, for every engine
def test_mini_batch_must_split_over_the_training_devices(backend):
    with pytest.raises(ConfigError, match="3 training devices"):
        _prepare(f"backend={backend}", "resources.gpus_per_node=3", "rollout.engine=vllm")


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "trl"])  # TRL: one accelerate launch per node
def test_multi_node_is_refused_everywhere(backend):
    # every run starts a private single-node Ray cluster (address="local")
    with pytest.raises(CapabilityError, match="resources.nodes"):
        _prepare(f"backend={backend}", "resources.nodes=2")


# ---- engine-specific checks and mappings ----


def test_verl_hf_rollout_refuses_a_kv_cache_fraction():
    with pytest.raises(CapabilityError, match="rollout.gpu_memory_utilization"):
        _prepare("backend=verl", "engine_version=0.5.0", "rollout.gpu_memory_utilization=0.5")


def test_verl_sglang_is_refused_on_cpu():
    with pytest.raises(CapabilityError, match="rollout.engine=sglang"):
        _prepare("backend=verl", "engine_version=0.9.1", "rollout.engine=sglang")


def test_verl_seed_keys_follow_the_version():
    old = _settings("backend=verl", "engine_version=0.5.0", "training.seed=123")
    assert old["data.seed"] == 123 and old["launch.env.RLBRIDGE_SEED"] == "123"
    assert "actor_rollout_ref.rollout.seed" not in old and "actor_rollout_ref.actor.data_loader_seed" not in old
    new = _settings("backend=verl", "engine_version=0.9.1", "training.seed=123")
    assert new["actor_rollout_ref.rollout.seed"] == new["actor_rollout_ref.actor.data_loader_seed"] == 123


def test_verl_bootstrap_seeds_every_process():
    """The plan's RLBRIDGE_SEED seeds torch (init, the HF rollout's sampling), numpy and random in every
    verl process through the adapter's bootstrap: two processes with the same seed draw the same
    numbers, another seed draws others."""
    code = (
        "from rlbridge_adapters.verl import boot; boot.install(); import torch, random; "
        "print(torch.rand(3).tolist(), random.random())"
    )

    def draw(seed):
        env = {**os.environ, "RLBRIDGE_SEED": str(seed)}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout

    assert draw(1) == draw(1) != draw(2)


def test_openrlhf_warmup_with_epochs_is_refused():
    with pytest.raises(CapabilityError, match="training.warmup_steps"):
        _prepare("backend=openrlhf", "training.steps=null", "training.epochs=2", "training.warmup_steps=3")


def test_openrlhf_keep_last_null_keeps_every_checkpoint():
    assert _settings("backend=openrlhf")["ckpt.max_num"] == 2**31 - 1  # OpenRLHF's own default keeps 3
    assert _settings("backend=openrlhf", "checkpoint.keep_last=2")["ckpt.max_num"] == 2


def test_openrlhf_tensor_parallel_error_names_tensor_parallel():
    with pytest.raises(CapabilityError) as info:
        _prepare("backend=openrlhf", "rollout.tensor_parallel_size=2")
    assert "rollout.tensor_parallel_size" in str(info.value) and "placement.policy" not in str(info.value)


def test_openrlhf_split_uses_the_policy_layout():
    settings = _settings(
        "backend=openrlhf",
        "resources.gpus_per_node=4",
        "placement.policy=split",
        "placement.args={rollout_gpus: 2}",
        "training.batch_size=4",
    )
    assert settings["actor.num_gpus_per_node"] == 2 and settings["vllm.num_engines"] == 2


# ---- plugin args are checked at plan time ----


@pytest.mark.parametrize(
    "override, field",
    [
        ("telemetry.sinks=[{name: csv, args: {bogus: 1}}]", "telemetry.sinks[0].args"),
        ("reward=[{name: digit_match, args: {bogus: 1}}]", "reward[0].args"),
        ("reward=[{name: length_penalty, args: {target_tokens: many}}]", "reward[0].args.target_tokens"),
        ("data.train={type: generator, name: digit_copy, args: {rows: 5}}", "data.train.args"),
        ("data.train={type: generator, name: digit_copy, args: {num_rows: many}}", "data.train.args.num_rows"),
        ("environment={name: digit_turns, args: {bogus: 1}}", "environment.args"),
    ],
)
def test_plugin_args_are_checked_against_the_factory(override, field):
    with pytest.raises(ConfigError) as info:
        _prepare("backend=trl", override)
    assert str(info.value).startswith(field), str(info.value)


def test_bad_sink_args_fail_train_with_one_line_and_nothing_written(tmp_path):
    res = run_cli(
        "train",
        str(QUICKSTART),
        "--set",
        "telemetry.sinks=[{name: csv, args: {bogus: 1}}]",
        "--set",
        f"output_dir={tmp_path}/out",
        "--no-progress",
    )
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "telemetry.sinks[0].args" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()


# ---- plan --explain and the generated knob page ----


def test_plan_explain_names_the_native_key_and_value():
    res = run_cli(
        "plan",
        str(QUICKSTART),
        "--set",
        "backend=openrlhf",
        "--set",
        "training.seed=123",
        "--explain",
        env={"COLUMNS": "250"},
    )
    assert res.returncode == 0, res.stderr
    line = next(line for line in res.stdout.splitlines() if "training.seed" in line)
    assert "123" in line and "train.seed=123" in line


def test_knob_page_is_generated_from_the_capability_tables():
    from rlbridge.run.knobdoc import builtin_backends, knob_markdown

    expected = knob_markdown(builtin_backends())
    assert (REPO / "docs" / "knobs.md").read_text() == expected, (
        "docs/knobs.md is out of date: run `rlbridge knobs -o docs/knobs.md`"
    )


def test_trl_seed_makes_the_first_step_reproducible_and_a_new_seed_changes_it(tmp_path):
    """A real 1-step TRL run: the same training.seed gives the same first-step prompts and completions,
    another seed others (so the seed, not chance, decides them); evaluation lands in eval_metrics.jsonl."""
    from rlbridge.run.runner import train

    base = [
        "training.steps=1",
        "training.batch_size=2",
        "algorithm.group_size=2",
        "rollout.max_new_tokens=6",
        "telemetry.samples_per_step=4",
        "resources.gpus_per_node=0",
        "data.eval={type: generator, name: digit_copy, args: {num_rows: 4}}",
        "data.eval_interval=1",
    ]

    def first_step(seed, name):
        out = tmp_path / name
        train(load_config(QUICKSTART, [*base, f"training.seed={seed}", f"output_dir={out}"]), progress=False)
        evals = [json.loads(line) for line in (out / "eval_metrics.jsonl").read_text().splitlines()]
        assert [e["step"] for e in evals] == [1] and "eval/reward/mean" in evals[0]
        rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        return [(r["prompt"], r["completion"]) for r in rows if r["step"] == 1]

    a, again, b = first_step(7, "a"), first_step(7, "again"), first_step(8, "b")
    assert a and a == again
    assert a != b


def test_trl_colocated_vllm_engine_gets_the_seed(monkeypatch):
    """TRL seeds its colocated vLLM engine with the process index only; inside a run the LLM it builds
    gets process index + training.seed."""
    vllm_generation = pytest.importorskip("trl.generation.vllm_generation")
    from rlbridge_adapters.trl.patch import vllm_seed

    made = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda *a, **kw: made.append(kw["seed"]), raising=False)
    with vllm_seed(123):
        vllm_generation.LLM(model="m", seed=0)  # what TRL passes for process 0
    vllm_generation.LLM(model="m", seed=0)  # outside a run: TRL's own value
    assert made == [123, 0]
