"""The TRL adapter against real TRL: its own config classes validate our plans, its own trainer
calls our reward shim, and short real runs on CPU produce canonical metrics."""

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("trl")

from rlbridge import hookimpl
from rlbridge.contract.backend import canonical_knobs
from rlbridge.run.loading import load_config
from rlbridge.contract.registry import PluginManager, RewardPlugin
from rlbridge.run.runner import prepare, train
from tests.conftest import MINIMAL, QUICKSTART, write_config

CANONICAL_KEYS = {
    "reward/mean",
    "reward/std",
    "reward/digit_match/mean",
    "loss/policy",
    "entropy",
    "grad_norm",
    "response_length/mean",
    "timing/step_s",
    "timing/generate_s",
    "timing/update_s",
    "throughput/tokens_per_s",
    "memory/peak_mb",
    "lr",
}


def _plan(tmp_path, *overrides, text=MINIMAL):
    return prepare(load_config(write_config(tmp_path, text), list(overrides)))


def test_capability_table_covers_every_knob():
    from rlbridge_adapters.trl.backend import TRLBackend

    assert set(TRLBackend().capability_table()) == set(canonical_knobs())


def test_quickstart_plan_is_accepted_by_grpoconfig(tmp_path):
    prepared = prepare(load_config(QUICKSTART))
    prepared.backend.validate(prepared.plan)  # GRPOConfig.__post_init__ runs TRL's own checks
    from rlbridge_adapters.trl.train import make_args

    args = make_args(prepared.plan.native)
    assert (args.num_generations, args.generation_batch_size, args.max_completion_length) == (8, 64, 16)
    assert args.use_cpu and not args.bf16 and not args.gradient_checkpointing
    assert (args.beta, args.loss_type, args.learning_rate) == (0.0, "dapo", 5e-3)


def test_batch_semantics_mini_and_micro_batches(tmp_path):
    # 4 prompts x 4 samples = 16 per step, mini batch 8 -> 2 optimizer updates per step, 2 epochs -> 4
    prepared = _plan(
        tmp_path,
        "training.batch_size=4",
        "training.mini_batch_size=8",
        "training.micro_batch_size=4",
        "algorithm.epochs_per_rollout=2",
        "training.steps=5",
        "training.warmup_steps=1",
    )
    native = prepared.plan.native
    args = native["args"]
    assert native["updates_per_step"] == 4
    assert (
        args["generation_batch_size"],
        args["per_device_train_batch_size"],
        args["gradient_accumulation_steps"],
    ) == (16, 4, 2)
    assert (args["max_steps"], args["logging_steps"], args["warmup_steps"], args["num_iterations"]) == (20, 4, 4, 2)
    from rlbridge_adapters.trl.train import make_args

    built = make_args(native)
    assert built.steps_per_generation == 4  # TRL's own arithmetic: 16 / (4 x 1 process)


def test_rloo_plan_uses_rlooconfig_with_kl_in_reward(tmp_path):
    prepared = _plan(tmp_path, "algorithm.name=rloo", "algorithm.kl_coef=0.05", "algorithm.kl_placement=reward")
    assert prepared.plan.native["config_class"] == "RLOOConfig"
    assert prepared.plan.native["args"]["beta"] == 0.05
    assert any("sequence-level" in note for note in prepared.plan.approximations)
    prepared.backend.validate(prepared.plan)


def test_grpo_rejects_kl_in_reward(tmp_path):
    from rlbridge.errors import CapabilityError

    with pytest.raises(CapabilityError, match="kl_placement=reward.*algorithm.name: rloo"):
        _plan(tmp_path, "algorithm.kl_coef=0.1", "algorithm.kl_placement=reward")


def test_dr_grpo_maps_to_its_loss_and_no_std_scaling(tmp_path):
    args = _plan(tmp_path, "algorithm.name=dr_grpo").plan.native["args"]
    assert (args["loss_type"], args["scale_rewards"]) == ("dr_grpo", "none")


def test_vllm_rollout_maps_to_colocate(tmp_path):
    native = _plan(tmp_path, "rollout.engine=vllm", "rollout.gpu_memory_utilization=0.5").plan.native
    assert native["args"]["use_vllm"] and native["args"]["vllm_mode"] == "colocate"
    assert native["args"]["vllm_gpu_memory_utilization"] == 0.5
    assert native["env"]["VLLM_TARGET_DEVICE"] == "cpu"


def test_vllm_knob_without_vllm_is_rejected(tmp_path):
    from rlbridge.errors import CapabilityError

    with pytest.raises(CapabilityError, match="only applies to rollout.engine: vllm"):
        _plan(tmp_path, "rollout.gpu_memory_utilization=0.5")


def test_backend_options_pass_through_reaches_grpoconfig(tmp_path):
    prepared = _plan(tmp_path, "backend_options.trl.mask_truncated_completions=true")
    from rlbridge_adapters.trl.train import make_args

    assert make_args(prepared.plan.native).mask_truncated_completions is True


def test_tiny_model_tokenizer_reloads_identically_with_autotokenizer(tmp_path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from rlbridge_plugins.models import build_tiny_model

    path = build_tiny_model(tmp_path / "tiny")
    auto, fast = AutoTokenizer.from_pretrained(path), PreTrainedTokenizerFast.from_pretrained(path)
    text = "hi there\nok: 1\t7777 {x} <|im_end|>"
    assert auto(text)["input_ids"] == fast(text)["input_ids"]
    assert auto.decode(auto(text)["input_ids"]) == text
    assert auto.decode(auto("7777")["input_ids"], skip_special_tokens=True) == "7777"
    assert len(auto("7777")["input_ids"]) == 4  # character level
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    assert cfg.hidden_size // cfg.num_attention_heads >= 32  # vLLM's CPU attention needs head_dim >= 32


class RecordingReward:
    """A reward plugin that records what TRL's own reward code hands to the rlbridge shim."""

    def __init__(self):
        self.calls = []

    @hookimpl
    def rlbridge_register_rewards(self):
        def factory(**args):
            def reward(inputs):
                self.calls.append(list(inputs))
                return [0.0 for _ in inputs]

            return reward

        return [RewardPlugin("recorder", factory, "records its inputs")]


@pytest.mark.engine
def test_short_grpo_run_writes_canonical_metrics_and_calls_the_shim(tmp_path):
    recorder = RecordingReward()
    pm = PluginManager()
    pm.register(recorder, "recorder")
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"output_dir={tmp_path}/run",
            "training.steps=3",
            "reward=[{name: digit_match}, {name: recorder, weight: 0.5}]",
        ],
    )
    summary = train(cfg, pm, progress=False)
    run = Path(tmp_path / "run")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert CANONICAL_KEYS <= set(row), CANONICAL_KEYS - set(row)
        assert "nonfinite" not in row and all(isinstance(v, (int, float)) and math.isfinite(v) for v in row.values())
        assert "reward/recorder/mean" in row
    assert summary["status"] == "completed" and summary["steps"] == 3
    for name in ("config.yaml", "plan.yaml", "summary.json", "reward.png", "native_metrics.jsonl"):
        assert (run / name).exists(), name
    # TRL called the shim once per step with the whole batch: 2 prompts x 4 samples
    assert len(recorder.calls) == 3 and all(len(batch) == 8 for batch in recorder.calls)
    from transformers import PreTrainedTokenizerFast

    from rlbridge.contract.models import materialize_model

    tok = PreTrainedTokenizerFast.from_pretrained(materialize_model(cfg))
    for x in recorder.calls[0]:
        assert x.prompt in {d * 4 for d in "0123456789"} and x.answer == x.prompt[0]
        assert 1 <= len(x.completion_ids) <= 8
        # the text is the ids decoded without special tokens: the ids show what the text hides
        assert x.completion == tok.decode(x.completion_ids, skip_special_tokens=True)


@pytest.mark.engine
def test_short_rloo_run_and_checkpoint_resume(tmp_path):
    saved = []

    class Saves:
        @hookimpl
        def rlbridge_checkpoint_saved(self, step, path):
            saved.append((step, Path(path).name))

    pm = PluginManager()
    pm.register(Saves(), "saves")
    base = [f"output_dir={tmp_path}/run", "algorithm.name=rloo", "checkpoint.interval=1"]
    train(load_config(write_config(tmp_path, MINIMAL), base), pm, progress=False)
    assert saved == [(1, "checkpoint-1"), (2, "checkpoint-2")]
    summary = train(
        load_config(write_config(tmp_path, MINIMAL), base + ["training.steps=3", "checkpoint.resume=true"]),
        pm,
        progress=False,
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # resumed at step 2, appended step 3
    assert summary["status"] == "completed" and saved[-1] == (3, "checkpoint-3")
