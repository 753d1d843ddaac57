"""The offline stages (algorithm.name sft, dpo, reward_model) and pipelines (docs/stages.md).

Plans: the batch arithmetic, the stage's TRL and OpenRLHF configs and the refusals (verl; OpenRLHF's
real runs are adapters/openrlhf/tests/in_env/test_openrlhf_stages_in_env.py). Real TRL runs on CPU with the
tiny builtin models: SFT's held-out loss falls (chat rows, the BPE tokenizer), DPO's held-out
preference accuracy rises from 0 to >= 0.8 (IPO loss), and configs/pipeline.yaml runs SFT -> RM -> GRPO
end to end: the RM reaches >= 0.8 held-out pairwise accuracy, the GRPO stage's RM reward rises, a
second run skips every finished stage, and `rlbridge report` shows the pipeline."""

import json

import pytest

from tests.conftest import REPO, proven_backends, run_cli
from rlbridge.errors import CapabilityError, ConfigError
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare, train

CONFIGS = REPO / "configs"


def _plan(config: str, *overrides: str):
    return prepare(load_config(CONFIGS / config, ["resources.gpus_per_node=0", *overrides]))


def _eval(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "eval_metrics.jsonl").read_text().splitlines()]


# ---- plans ----


def test_stage_plans_use_the_stage_trainer_and_todays_batch_semantics():
    native = _plan(
        "dpo.yaml",
        "training.batch_size=16",
        "training.mini_batch_size=8",
        "training.micro_batch_size=4",
        "training.steps=5",
        "offline.dpo_loss=ipo",
        "offline.dpo_beta=0.3",
        "offline.max_length=48",
    ).plan.native
    args = native["args"]
    assert (native["trainer"], native["config_class"]) == ("DPOTrainer", "DPOConfig")
    # 16 pairs per step in updates of 8 pairs, 4 per forward/backward: 2 updates per step of 2 accumulations
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"], args["max_steps"]) == (4, 2, 10)
    assert (native["updates_per_step"], args["logging_steps"]) == (2, 2)
    assert (args["loss_type"], args["beta"], args["max_length"]) == (["ipo"], 0.3, 48)
    sft = _plan("sft.yaml", "offline.completion_only_loss=false").plan.native
    assert (sft["trainer"], sft["args"]["completion_only_loss"], sft["args"]["packing"]) == ("SFTTrainer", False, False)
    rm = _plan("reward_model.yaml", "model.lora={rank: 4}").plan.native
    assert rm["trainer"] == "RewardTrainer" and rm["lora"]["task_type"] == "SEQ_CLS"  # the score head is trained too


@pytest.mark.parametrize(
    "override, knob",
    [
        ("rollout.temperature=0.5", "rollout.temperature"),
        ("reward=[{name: digit_match}]", "reward"),
        ("algorithm.group_size=4", "algorithm.group_size"),
    ],
)
def test_rl_knobs_in_an_offline_stage_are_errors_naming_the_knob(override, knob):
    with pytest.raises(ConfigError, match=knob.replace(".", r"\.")):
        _plan("sft.yaml", override)


def test_offline_knobs_outside_their_stage_are_refused():
    with pytest.raises(CapabilityError, match=r"offline\.dpo_beta.*only to algorithm\.name dpo"):
        _plan("sft.yaml", "offline.dpo_beta=0.3")
    with pytest.raises(CapabilityError, match=r"offline\.max_length"):
        _plan("quickstart.yaml", "offline.max_length=64")


@pytest.mark.parametrize(
    "stage, why, version",
    [
        ("dpo", "no offline DPO trainer", None),
        ("reward_model", "no reward-model trainer", None),
        ("sft", "from verl 0.9.0", "0.5.0"),
    ],
)
def test_verl_without_the_stage_refuses_it_naming_why(stage, why, version):
    with pytest.raises(CapabilityError, match=f"algorithm.name={stage}.*{why}"):
        _plan(f"{stage}.yaml", "backend=verl", *([f"engine_version={version}"] if version else []))


def test_openrlhf_dpo_with_the_chat_template_is_refused_naming_why():
    with pytest.raises(CapabilityError, match="algorithm.name=dpo.*chat template"):
        _plan("dpo.yaml", "backend=openrlhf", "model.use_chat_template=true")


def test_openrlhf_plans_its_own_stage_scripts():
    sft = _plan(
        "sft.yaml", "backend=openrlhf", "training.batch_size=16", "training.mini_batch_size=8", "training.steps=5"
    )
    settings = sft.backend.native_settings(sft.plan)
    assert sft.plan.native["module"] == "openrlhf.cli.train_sft"
    # 16 rows per step in updates of 8: --train.batch_size is the mini batch, 5 x 16 rows in one epoch
    assert (settings["train.batch_size"], settings["data.max_samples"], settings["train.max_epochs"]) == (8, 80, 1)
    dpo = _plan("dpo.yaml", "backend=openrlhf", "offline.dpo_loss=ipo")
    assert dpo.plan.native["module"] == "openrlhf.cli.train_dpo"
    assert dpo.backend.native_settings(dpo.plan)["model.ipo_enable"] is True
    assert _plan("reward_model.yaml", "backend=openrlhf").plan.native["module"] == "openrlhf.cli.train_rm"


def test_verl_plans_its_sft_trainer_with_todays_batch_semantics():
    sft = _plan(
        "sft.yaml",
        "backend=verl",
        "training.batch_size=16",
        "training.mini_batch_size=8",
        "training.micro_batch_size=2",
        "training.steps=5",
        "training.warmup_steps=1",
        "data.eval_interval=2",
        "checkpoint.interval=3",
        "offline.max_length=48",
    )
    native = sft.plan.native
    o = native["overrides"]
    assert (native["module"], native["config_name"], native["rows"]) == (
        "verl.trainer.sft_trainer",
        "sft_trainer_engine",
        "chat",
    )
    # 16 rows per step in updates of 8 (verl's SFT step is one update): 2 verl steps per canonical step
    assert (o["data.train_batch_size"], o["data.micro_batch_size_per_gpu"], o["trainer.total_training_steps"]) == (
        8,
        2,
        10,
    )
    assert (o["optim.lr_warmup_steps"], o["trainer.test_freq"], o["trainer.save_freq"], native["updates_per_step"]) == (
        2,
        4,
        6,
        2,
    )
    assert (o["data.max_length"], o["data.truncation"], o["+engine.mixed_precision"]["param_dtype"]) == (
        48,
        "right",
        "fp32",
    )
    assert (
        "hf_model" in o["checkpoint.save_contents"] and o["engine.strategy"] == "fsdp2"
    )  # FSDP2 on CPU, as verl's RL plan
    assert "eos_token" in native["model"]["chat_template"]  # no chat template: the texts, the completion ended with EOS
    assert _plan("sft.yaml", "backend=verl", "offline.completion_only_loss=false").plan.native["rows"] == "whole"
    assert (
        _plan("sft.yaml", "backend=verl", "model.use_chat_template=true").plan.native["model"]["chat_template"] is None
    )


@pytest.mark.parametrize(
    "override, knob, why",
    [
        ("model.lora={rank: 4}", "model.lora", "LoRA adapter"),
        ("data.shuffle=false", "data.shuffle", "always shuffles"),
        ("offline.packing=true", "offline.packing", "flash attention"),
        ("resources.gpus_per_node=2", "resources.gpus_per_node", "one process"),
    ],
)
def test_verl_sft_refuses_what_its_sft_trainer_cannot_do_naming_the_knob(override, knob, why):
    with pytest.raises(CapabilityError, match=f"{knob.replace('.', chr(92) + '.')}.*{why}"):
        prepare(
            load_config(
                CONFIGS / "sft.yaml",
                ["backend=verl", *([] if "gpus" in override else ["resources.gpus_per_node=0"]), override],
            )
        )
    with pytest.raises(CapabilityError, match=r"offline\.completion_only_loss.*assistant messages only"):
        _plan("sft.yaml", "backend=verl", "offline.completion_only_loss=false", "model.use_chat_template=true")


def test_rows_are_checked_for_the_stage(tmp_path):
    from rlbridge.contract.data import load_rows

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "1111", "answer": "1"}) + "\n")
    config = load_config(CONFIGS / "dpo.yaml", [f"data.train={{type: jsonl, path: {rows}}}"])
    with pytest.raises(ConfigError, match="'chosen', 'rejected'"):
        load_rows(config.data.train, config, "data.train")
    rows.write_text(
        json.dumps({"messages": [{"role": "user", "content": "1"}, {"role": "assistant", "content": "1"}]}) + "\n"
    )
    config = load_config(CONFIGS / "sft.yaml", [f"data.train={{type: jsonl, path: {rows}}}"])
    with pytest.raises(ConfigError, match="use_chat_template: true"):
        load_rows(config.data.train, config, "data.train")


def test_pipeline_files_are_checked_before_anything_runs(tmp_path):
    from rlbridge.run.pipeline import load_pipeline, run_pipeline

    path = tmp_path / "p.yaml"
    path.write_text(
        f"stages:\n  - {{name: a, config: {CONFIGS / 'sft.yaml'}, set: {{model.path: '{{b.model}}'}}}}\n"
        f"  - {{name: b, config: {CONFIGS / 'sft.yaml'}}}\n"
    )
    with pytest.raises(ConfigError, match="no earlier stage is named 'b'"):
        load_pipeline(path)
    path.write_text(f"stages:\n  - {{name: a, config: {CONFIGS / 'sft.yaml'}}}\n")
    with pytest.raises(ConfigError, match="name their stage first"):
        run_pipeline(path, ["training.steps=3"])


# ---- real TRL runs ----


def test_sft_held_out_loss_falls_on_chat_rows_with_a_bpe_tokenizer(tmp_path):
    chat = "{type: generator, name: digit_sft, args: {num_rows: %d, format: messages, seed: %d}}"
    summary = train(
        load_config(
            CONFIGS / "sft.yaml",
            [
                f"output_dir={tmp_path}",
                "model.path=builtin:tiny-bpe",
                "model.use_chat_template=true",
                f"data.train={chat % (512, 0)}",
                f"data.eval={chat % (32, 1)}",
                "data.eval_interval=10",
                "training.steps=20",
            ],
        ),
        progress=False,
    )
    evals = _eval(tmp_path)
    assert [e["step"] for e in evals] == [0, 10, 20]
    first, last = evals[0]["eval/loss/sft"], evals[-1]["eval/loss/sft"]
    assert last < 0.6 * first, evals
    assert summary["model"] == str(tmp_path / "model") and (tmp_path / "model" / "model.safetensors").is_file()


def test_dpo_held_out_preference_accuracy_rises_to_0_8(tmp_path):
    train(
        load_config(CONFIGS / "dpo.yaml", [f"output_dir={tmp_path}", "offline.dpo_loss=ipo", "offline.dpo_beta=0.2"]),
        progress=False,
    )
    evals = _eval(tmp_path)
    assert evals[0]["step"] == 0 and evals[0]["eval/dpo/accuracy"] <= 0.6, evals  # policy == reference: ties
    assert evals[-1]["eval/dpo/accuracy"] >= 0.8, evals
    assert evals[-1]["eval/dpo/margin"] > evals[0]["eval/dpo/margin"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"loss/dpo", "dpo/reward_chosen", "dpo/reward_rejected", "dpo/margin", "dpo/accuracy"} <= set(rows[-1])


def test_pipeline_sft_rm_grpo_learns_skips_finished_stages_and_reports(tmp_path):
    """configs/pipeline.yaml as shipped (outputs under tmp_path): ~1 min on 2 CPU cores."""
    res = run_cli(
        "train", str(CONFIGS / "pipeline.yaml"), "--no-progress", "--set", "grpo.training.steps=30", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "runs" / "pipeline"
    record = json.loads((out / "pipeline.json").read_text())
    assert record["status"] == "completed" and [s["name"] for s in record["stages"]] == ["sft", "rm", "grpo"]
    sft, rm, grpo = record["stages"]
    assert rm["model_in"] == grpo["model_in"] == sft["model_out"]  # each stage's output is the next one's input
    sft_eval = _eval(out / "sft")
    assert sft_eval[-1]["eval/loss/sft"] < sft_eval[0]["eval/loss/sft"]
    assert _eval(out / "rm")[-1]["eval/rm/accuracy"] >= 0.8
    rewards = [json.loads(line)["reward/mean"] for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.3, rewards  # the trained RM's reward rises
    config = (out / "grpo" / "config.yaml").read_text()
    assert rm["model_out"] in config  # the GRPO stage's reward is the trained RM

    again = run_cli(
        "train", str(CONFIGS / "pipeline.yaml"), "--no-progress", "--set", "grpo.training.steps=30", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("skipped (finished before)") == 3, again.stdout

    report = run_cli("report", str(out), "-o", str(tmp_path / "r.html"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "r.html").read_text()
    assert "Pipeline pipeline: completed" in page and "reward_model" in page and "loss/sft" in page


FLAKY = """
from pathlib import Path

from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin


def flaky(flag: str):
    calls = []

    def reward(inputs):
        calls.append(1)
        if len(calls) > 6 and Path(flag).exists():
            raise RuntimeError("flaky: failing on purpose while the flag file exists")
        return [x.completion.count(x.answer) / max(len(x.completion), 1) for x in inputs]

    return reward


@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("flaky", flaky, "digit share; raises after 6 calls while FLAG exists")]
"""


def test_a_failed_pipeline_stage_resumes_from_its_checkpoint_and_finished_ones_are_not_rerun(tmp_path):
    from rlbridge.run.pipeline import run_pipeline

    (tmp_path / "flaky.py").write_text(FLAKY)
    flag = tmp_path / "fail"
    flag.touch()
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"""\
output_dir: {tmp_path / "out"}
stages:
  - {{name: sft, config: {CONFIGS / "sft.yaml"}, set: {{training.steps: 4, data.eval: null, data.eval_interval: 10}}}}
  - name: grpo
    config: {CONFIGS / "quickstart.yaml"}
    set:
      model.path: "{{sft.model}}"
      plugins: [{tmp_path / "flaky.py"}]
      reward: [{{name: flaky, args: {{flag: "{flag}"}}}}]
      rollout_workers: {{mode: inline, on_error: fail}}
      training: {{steps: 10, batch_size: 2, lr: 5.0e-3}}
      algorithm.group_size: 4
      rollout.max_new_tokens: 8
      checkpoint.interval: 5
      telemetry.progress: false
""")
    with pytest.raises(Exception, match="failing on purpose"):
        run_pipeline(pipeline)  # grpo dies at step 7, after its checkpoint of step 5
    record = json.loads((tmp_path / "out" / "pipeline.json").read_text())
    assert [s["status"] for s in record["stages"]] == ["completed", "failed"] and record["status"] == "failed"
    metrics = tmp_path / "out" / "grpo" / "metrics.jsonl"
    before = metrics.read_text().splitlines()
    assert [json.loads(line)["step"] for line in before][:5] == [1, 2, 3, 4, 5]
    flag.unlink()
    record = run_pipeline(pipeline)
    sft, grpo = record["stages"]
    assert sft["skipped"] and not grpo["skipped"] and grpo["resumed"], record
    assert grpo["summary"]["status"] == "completed"
    after = metrics.read_text().splitlines()
    assert after[:5] == before[:5]  # kept, not trained again (a fresh run rewrites them, with other timings)
    assert [json.loads(line)["step"] for line in after if json.loads(line)["step"] > 5] == [6, 7, 8, 9, 10]


def _other_engines_for_the_rl_stage() -> list[tuple[str, str]]:
    """(engine, version) proven end to end that can run configs/pipeline.yaml's GRPO stage (the quickstart
    with a reward model as its only reward), other than the engine of the pipeline's offline stages."""
    import yaml

    stages = yaml.safe_load((CONFIGS / "pipeline.yaml").read_text())["stages"]
    offline = {yaml.safe_load((CONFIGS / s["config"]).read_text())["backend"] for s in stages[:-1]}
    grpo = {
        **yaml.safe_load((CONFIGS / stages[-1]["config"]).read_text()),
        "reward": [{"model": "builtin:tiny-reward"}],
    }
    return [(b.name, b.default_version) for b in proven_backends(grpo) if b.name not in offline]


@pytest.mark.engine
@pytest.mark.engine_env
@pytest.mark.matrix_only
@pytest.mark.parametrize("engine,version", _other_engines_for_the_rl_stage())
def test_the_pipeline_with_its_rl_stage_on_another_engine(engine, version, tmp_path):
    """configs/pipeline.yaml with SFT and RM on TRL (here) and GRPO on ENGINE in its environment, from
    the trained SFT model with the trained RM as its reward: the stages of one pipeline on different engines."""
    import os
    from pathlib import Path

    from rlbridge.envs.create import find_env

    from rlbridge.engine.environments import envs_dir

    real = Path(os.environ.get("RLBRIDGE_TEST_ENVS") or Path.home() / ".cache" / "rlbridge" / "envs")
    if not envs_dir().exists() and real.is_dir():
        envs_dir().parent.mkdir(parents=True, exist_ok=True)
        envs_dir().symlink_to(real)
    try:
        find_env(engine, version)
    except Exception as exc:
        pytest.skip(f"no {engine}=={version} environment here ({exc})")
    res = run_cli(
        "train",
        str(CONFIGS / "pipeline.yaml"),
        "--no-progress",
        "--set",
        f"grpo.backend={engine}",
        "--set",
        f"grpo.engine_version={version}",
        "--set",
        "grpo.training.steps=2",
        "--set",
        "grpo.training.batch_size=2",
        "--set",
        "grpo.algorithm.group_size=4",
        cwd=tmp_path,
        env={"RLBRIDGE_CACHE_DIR": os.environ["RLBRIDGE_CACHE_DIR"]},
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    record = json.loads((tmp_path / "runs" / "pipeline" / "pipeline.json").read_text())
    grpo = record["stages"][-1]
    assert (
        grpo["backend"] == engine
        and grpo["summary"]["steps"] == 2
        and grpo["model_in"] == record["stages"][0]["model_out"]
    )


def test_a_trained_reward_model_served_by_verl_fits_its_own_context(tmp_path):
    """The pipeline's GRPO stage on verl 0.9 with the RM stage's model as its only reward: verl serves it
    with vLLM, whose max_model_len may not exceed the model's max_position_embeddings (512 for a reward
    model trained from builtin:tiny-digits; vLLM refused 1288 = 1024 + 8 + 256)."""
    rm = tmp_path / "rm"
    rm.mkdir()
    (rm / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 512}))
    for name in ("model.safetensors", "tokenizer.json"):  # what the pre-flight check of a model directory looks for
        (rm / name).write_text("")
    plan = _plan(
        "quickstart.yaml",
        "backend=verl",
        "engine_version=0.9.1",
        f"reward=[{{model: {rm}}}]",
        "rollout.max_new_tokens=8",
    ).plan.native["overrides"]
    assert plan["reward.reward_model.model_path"] == str(rm)
    assert plan["reward.reward_model.rollout.max_model_len"] == 512
    assert plan["reward.reward_model.rollout.max_num_batched_tokens"] == 512
