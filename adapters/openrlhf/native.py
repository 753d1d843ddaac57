"""A bench arm of kind `native` on OpenRLHF: the plan's arguments run by OpenRLHF's own entry point
(`python -m openrlhf.cli.train_ppo_ray ...`), with no rlbridge process around it. It measures
rlbridge's overhead on OpenRLHF.

Two sub-commands, both run by `rlbridge bench` with the engine environment's Python, outside the
timed command:

- `prepare JOB.json RUN_DIR` writes what an OpenRLHF user prepares: the prompt JSONL (prompt and
  label columns), an OpenRLHF reward function file (`reward_func(queries, prompts, labels)`, loaded
  by OpenRLHF's own SingleTurnAgentExecutor through --reward.remote_url), and RUN_DIR/native_cmd.json.
- `canonical RAW_DIR OUT.jsonl` reads OpenRLHF's own TensorBoard train/* scalars (one set per step)
  and writes them under canonical names, each step with the wall time TensorBoard stamped on it.

What is not OpenRLHF's own: rlbridge's CPU patches, and only them (OpenRLHF does not run on CPU
without them), installed in every process by the Ray engines' sitecustomize calling install_patches_only
set. One of them is this module's: on CPU, OpenRLHF's own `ray.init()` is given the logical GPUs
that its actors ask for, a private temp dir and `address="local"` (what `ray start --num-gpus` would
give a CPU user, without attaching to another job's cluster).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from rlbridge.engine.kit import (
    native_arm_main,
    install_native_arm_patches,
    native_arm_env,
    start_native_arm,
    wrap_once,
    write_native_cmd,
)

RAY_ENV = "RLBRIDGE_OPENRLHF_NATIVE_RAY"  # ray.init's CPU arguments, read in the driver

# The quickstart's digit_match reward (plugins/rewards.py) as an OpenRLHF user writes it. OpenRLHF
# hands it the decoded prompt + response with special tokens kept; the tiny-digits tokenizer is
# byte-level, so the response's tokens are its characters, each special token counting as one.
REWARD_FILES = {
    "digit_match": '''\
import torch

SPECIAL = ("<|im_end|>", "<|endoftext|>", "<|im_start|>", "<pad>")


def _tokens(text):
    for s in SPECIAL:
        text = text.replace(s, "\\x00")
    return len(text)


def reward_func(queries, prompts, labels):
    """Fraction of the response's tokens equal to the answer digit (label)."""
    out = []
    for query, prompt, label in zip(queries, prompts, labels):
        response = query[len(prompt):] if query.startswith(prompt) else query
        n = max(_tokens(response), 1)
        out.append(min(response.count(str(label)), n) / n)
    rewards = torch.tensor(out, dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {}}
''',
}


def install_patches_only() -> None:
    """The boot (rlbridge.engine.ray_engine.boot_env) of a native arm's processes: the CPU-enablement patches (and
    those marked
    in_native_arms: what --train.full_determinism_enable needs to repeat), nothing else."""
    from rlbridge.engine.importhooks import when_imported
    from rlbridge_adapters.openrlhf.boot import NATIVE_ENV
    from rlbridge_adapters.openrlhf.patches import PATCHES

    install_native_arm_patches(PATCHES, NATIVE_ENV, "RLBRIDGE_UNUSED")
    if os.environ.get(RAY_ENV):
        when_imported("ray", _cpu_ray_init)


def _cpu_ray_init(ray) -> None:
    settings = json.loads(os.environ[RAY_ENV])

    def make(original):
        def init(*args, **kwargs):
            if not args and "address" not in kwargs and not os.environ.get("RAY_ADDRESS"):
                kwargs = {**settings, **kwargs}
            return original(*args, **kwargs)

        return init

    wrap_once(ray, "init", make)


def prepare(job_path: Path, run_dir: Path) -> dict:
    from rlbridge.engine.model_dir import model_dir_with_template
    from rlbridge_adapters.openrlhf.backend import MAX_LEN_AUTO
    from rlbridge_adapters.openrlhf.boot import NATIVE_ENV
    from rlbridge_adapters.openrlhf.prompts import longest_prompt
    from rlbridge_adapters.openrlhf.train import write_jsonl

    job, native, run_dir = start_native_arm(
        job_path, run_dir, REWARD_FILES, "native OpenRLHF arm", "an OpenRLHF reward file"
    )
    rewards = native["rewards"]
    if native.get("environment") or native["data"].get("chat_template_kwargs") or native["data"].get("drop_over"):
        raise SystemExit(
            "native OpenRLHF arm: environments, chat_template_kwargs and dropped prompts need rlbridge; "
            "bench them with kind rlbridge"
        )
    model_dir = model_dir_with_template(job["model_dir"], native["model"]["chat_template"], run_dir)
    data = native["data"]
    rows = list(job["rows"])
    needed = job["steps"] * job["batch_size"]
    while len(rows) < needed:  # as the rlbridge arm: exactly enough prompts for the steps
        rows = rows + rows
    write_jsonl(
        [{"prompt": r[data["prompt_key"]], "label": str(r.get(data["answer_key"], ""))} for r in rows],
        run_dir / "data" / "train.jsonl",
    )
    reward_file = run_dir / "reward_func.py"
    reward_file.write_text(REWARD_FILES[rewards[0]["name"]])

    argv = [a.replace("<run_dir>", str(run_dir)).replace("<model_dir>", model_dir) for a in native["args"]]
    if MAX_LEN_AUTO in argv:
        prompts = [r[data["prompt_key"]] for r in rows]
        argv[argv.index(MAX_LEN_AUTO)] = str(
            longest_prompt(prompts, model_dir, job["use_chat_template"]) + job["max_new_tokens"]
        )
    # rlbridge's arm scores through its agent executor (token ids); a native user's reward_func file instead
    flag = argv.index("--train.agent_func_path")
    argv[flag : flag + 2] = ["--reward.remote_url", str(reward_file)]
    argv = [
        str(run_dir / "checkpoints") if i and argv[i - 1] in ("--ckpt.path", "--ckpt_path") else a
        for i, a in enumerate(argv)
    ]
    tmp = tempfile.mkdtemp(prefix="rlb-ray-")  # short: Ray's socket paths have a length limit
    ray = {"address": "local", "num_cpus": native["ray"]["num_cpus"], "_temp_dir": tmp, "include_dashboard": False}
    if native["ray"].get("logical_gpus"):
        ray["num_gpus"] = native["ray"]["logical_gpus"]
    env = native_arm_env(
        native,
        run_dir,
        "rlbridge_adapters.openrlhf.native:install_patches_only",
        NATIVE_ENV,
        "openrlhf_native_plan.json",
        **{RAY_ENV: json.dumps(ray)},
    )
    tb = argv[argv.index("--logger.tensorboard_dir") + 1]
    cmd = {
        "argv": [sys.executable, "-m", native["module"], *argv],
        "env": env,
        "metrics": tb,
        "metrics_kind": "tensorboard",
        "cwd": str(run_dir),
        "ray_temp_dir": tmp,
    }
    return write_native_cmd(run_dir, cmd)


def canonical(raw: Path, out: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlbridge_adapters.openrlhf.metrics import to_canonical

    steps: dict[int, dict[str, float]] = {}
    walls: dict[int, float] = {}
    for events in sorted({p.parent for p in Path(raw).rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            if not tag.startswith("train/"):
                continue
            for event in acc.Scalars(tag):
                steps.setdefault(event.step, {})[tag[len("train/") :]] = event.value
                walls[event.step] = max(walls.get(event.step, 0.0), event.wall_time)
    with open(out, "w") as fh:
        for step in sorted(steps):
            fh.write(json.dumps({"step": step, **to_canonical(steps[step]), "_wall_time": walls[step]}) + "\n")


def main(argv: list[str]) -> None:
    usage = "usage: python -m rlbridge_adapters.openrlhf.native prepare JOB.json RUN_DIR | canonical TB_DIR OUT.jsonl"
    native_arm_main(argv, prepare, canonical, usage)


if __name__ == "__main__":
    main(sys.argv[1:])
