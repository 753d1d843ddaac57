"""A bench arm of kind `native` on AReaL: the plan's AReaL config run by an AReaL user's own training script
(examples/math/gsm8k_rl.py's shape: load_expr_config, PPOTrainer, AReaL's RLVRWorkflow with a reward function),
with no rlbridge process around it. It measures rlbridge's overhead on AReaL.

Two sub-commands, both run by `rlbridge bench` with the engine environment's Python, outside the timed command:

- `prepare JOB.json RUN_DIR` writes what an AReaL user prepares before launching: the dataset (jsonl), the model
  directory with the run's chat template, the reward function in AReaL's convention, the training script, the
  config (AReaL's TensorBoard writer on: its own per-step log) and RUN_DIR/native_cmd.json.
- `canonical RAW OUT.jsonl` maps AReaL's TensorBoard scalars (the events file under RAW) to canonical names.

What is not AReaL's own: the adapter's patches, and only them (AReaL 1.0.4's vLLM server does not start on vLLM
0.29 without areal-vllm-server-on-vllm-0.29, nor reload weights on vLLM-CPU without the unpacked-linear one). They
are installed in every process by the boot calling install_patches_only: no metric copy, reward shim or
checkpoint handling.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

from rlbridge.engine.kit import native_arm_main, native_arm_env, start_native_arm, write_native_cmd

# The quickstart's digit_match reward (plugins/rewards.py) as an AReaL user writes it, in AReaL's convention
# (RLVRWorkflow._compute_rewards: the decoded completion and the engine's completion ids).
REWARD_FILES = {
    "digit_match": '''\
def reward_fn(prompt, completions, prompt_ids, completion_ids, answer=None, **kwargs):
    """Fraction of the generated tokens that are the answer digit (every generated id counts)."""
    n = max(len(completion_ids), 1)
    return min(completions.count(str(answer)), n) / n


def prompt_ids(messages, tokenizer, enable_thinking):
    """The prompt text as is (the run's use_chat_template: false): AReaL's get_input_ids_fn."""
    return tokenizer(messages[0]["content"], add_special_tokens=False)["input_ids"]
''',
}
SCRIPT = """\
import json
import sys

from datasets import Dataset

from areal import PPOTrainer
from areal.api.cli_args import GRPOConfig, load_expr_config


def main(args):
    config, _ = load_expr_config(args, GRPOConfig)
    rows = [json.loads(line) for line in open("data/train.jsonl")]
    train = Dataset.from_list(
        [{{"messages": [{{"role": "user", "content": r["prompt"]}}], "answer": r["answer"]}} for r in rows]
    )
    kwargs = dict(reward_fn="native_reward.reward_fn", gconfig=config.gconfig, tokenizer=config.tokenizer_path{extra})
    with PPOTrainer(config, train_dataset=train, valid_dataset=None) as trainer:
        trainer.train(workflow="areal.workflow.rlvr.RLVRWorkflow", workflow_kwargs=kwargs)


if __name__ == "__main__":
    main(sys.argv[1:])
"""


def install_patches_only() -> None:
    """The boot (rlbridge.engine.ray_engine.boot_env) of a native arm's processes: the adapter's patches only."""
    from rlbridge.engine.patches import apply_from_environment
    from rlbridge_adapters.areal.boot import NATIVE_ENV
    from rlbridge_adapters.areal.patches import PATCHES

    apply_from_environment(PATCHES, NATIVE_ENV, "RLBRIDGE_AREAL_PATCH_REPORT_UNUSED")


def prepare(job_path: Path, run_dir: Path) -> dict:
    import yaml

    from rlbridge.engine.model_dir import model_dir_with_template
    from rlbridge.engine.ray_engine import boot_env
    from rlbridge_adapters.areal.boot import NATIVE_ENV
    from rlbridge_adapters.areal.train import _filled, exactly

    job, native, run_dir = start_native_arm(
        job_path, run_dir, REWARD_FILES, "native AReaL arm", "an AReaL reward function"
    )
    rewards = native["rewards"]
    workflow = native["workflow"]
    if workflow["chat_template_kwargs"] or native["data"].get("max_prompt_tokens"):
        raise SystemExit(
            "native AReaL arm: chat-template arguments and prompt caps are rlbridge's; bench them with kind rlbridge"
        )
    model_dir = model_dir_with_template(job["model_dir"], native["model"]["chat_template"], run_dir)
    data = native["data"]
    rows = exactly(
        [{"prompt": str(r[data["prompt_key"]]), "answer": r.get(data["answer_key"])} for r in job["rows"]],
        data.get("rows"),
    )
    (run_dir / "data").mkdir(exist_ok=True)
    (run_dir / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "native_reward.py").write_text(REWARD_FILES[rewards[0]["name"]])
    extra = "" if workflow["use_chat_template"] else ', get_input_ids_fn="native_reward.prompt_ids"'
    (run_dir / "native_train.py").write_text(SCRIPT.format(extra=extra))
    longest = max(len(r["prompt"]) for r in rows) + 8  # byte-level tokenizers: at most one id a character
    config = _filled(native["config"], str(run_dir), model_dir, longest + job["max_new_tokens"])
    config["stats_logger"]["tensorboard"] = {"path": str(run_dir / "tensorboard")}
    config["recover"]["fileroot"] = str(run_dir / "checkpoints")
    (run_dir / "areal_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    env = native_arm_env(
        native,
        run_dir,
        "rlbridge_adapters.areal.native:install_patches_only",
        NATIVE_ENV,
        "areal_native_plan.json",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join([str(run_dir), boot_env("x")["PYTHONPATH"]]),
    )
    cmd = {
        "argv": [sys.executable, "native_train.py", "--config", str(run_dir / "areal_config.yaml")],
        "env": env,
        "metrics": str(run_dir / "tensorboard"),
        "cwd": str(run_dir),
    }
    return write_native_cmd(run_dir, cmd)


def scalars(directory: Path) -> dict[int, dict[str, float]]:
    """step -> {tag: value} of the TensorBoard event files under `directory` (TFRecord frames of Event protos,
    read with tensorboardX's own protos: the writer AReaL uses)."""
    from tensorboardX.proto.event_pb2 import Event

    steps: dict[int, dict[str, float]] = {}
    for file in sorted(directory.rglob("events.out.tfevents.*")):
        data = file.read_bytes()
        at = 0
        while at + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            record = data[at + 12 : at + 12 + length]
            at += 12 + length + 4
            if len(record) < length:
                break  # a frame still being written
            event = Event.FromString(record)
            for value in event.summary.value:
                steps.setdefault(int(event.step), {})[value.tag] = float(value.simple_value)
    return steps


def canonical(raw: Path, out: Path) -> None:
    from rlbridge_adapters.areal.metrics import is_step, to_canonical

    with open(out, "w") as fh:
        for step, data in sorted(scalars(raw).items()):
            if is_step(data):
                fh.write(json.dumps({"step": step + 1, **to_canonical(data)}) + "\n")


def main(argv: list[str]) -> None:
    usage = "usage: python -m rlbridge_adapters.areal.native prepare JOB.json RUN_DIR | canonical RAW OUT.jsonl"
    native_arm_main(argv, prepare, canonical, usage)


if __name__ == "__main__":
    main(sys.argv[1:])
