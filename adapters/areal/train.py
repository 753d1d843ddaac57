"""Running an AReaL plan in this (engine) process: data, model directory, the config file, then AReaL's
PPOTrainer as its single controller, here, with rlbridge's RolloutWorkflow.

PPOTrainer's local scheduler starts AReaL's RPC workers (training ranks, rollout workers) and the inference
server as child processes with this process's environment, so each runs rlbridge's bootstrap (the sitecustomize
on PYTHONPATH, rlbridge.engine.ray_engine.boot_env): the version-gated patches, and the copy of each step's
statistics, checkpoints and weight updates into the events file this process follows.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from rlbridge.contract.data import load_rows
from rlbridge.engine.checkpoints import step_dirs
from rlbridge.engine.follower import EventFollower, following
from rlbridge.engine.model_dir import run_and_model_dirs
from rlbridge.engine.ray_engine import BOOT_DIR, worker_env
from rlbridge.errors import ConfigError, RLBridgeError
from rlbridge_adapters.areal import boot
from rlbridge_adapters.areal.backend import AUTO
from rlbridge_adapters.areal.metrics import eval_to_canonical, is_step, to_canonical

CONFIG_FILE = "areal_config.yaml"


def dataset_rows(
    rows: list[dict[str, Any]], data: dict[str, Any], tokenizer, workflow: dict[str, Any], field: str
) -> tuple[list[dict[str, Any]], int]:
    """rlbridge's rows as AReaL's dataset items (the prompt text, the answer and the whole row for the
    reward plugins' metadata), prompts over max_prompt_tokens dropped or refused; and the longest prompt in
    tokens, as the workflow will render it."""
    from rlbridge_adapters.areal.reward import prompt_ids

    cap, drop = data.get("max_prompt_tokens"), data.get("drop_over")
    out, longest, dropped = [], 1, 0
    for i, row in enumerate(rows):
        prompt = str(row[data["prompt_key"]])
        length = len(prompt_ids(tokenizer, prompt, workflow["use_chat_template"], workflow["chat_template_kwargs"]))
        if cap and length > cap:
            if drop:
                dropped += 1
                continue
            raise ConfigError(
                f"{field}: row {i} has a prompt of {length} tokens, over rollout.max_prompt_tokens ({cap}); raise "
                "the cap or set rollout.drop_overlong_prompts: true"
            )
        longest = max(longest, length)
        out.append({"prompt": prompt, "answer": row.get(data["answer_key"]), "row": json.dumps(row, default=str)})
    if dropped:
        print(f"rlbridge: dropped {dropped} {field} prompt(s) over {cap} tokens", file=sys.stderr)
    if not out:
        raise ConfigError(f"{field}: no prompt is within rollout.max_prompt_tokens ({cap}); raise the cap")
    return out, longest


def exactly(rows: list[dict[str, Any]], count: int | None) -> list[dict[str, Any]]:
    """`count` rows (the data repeated as often as needed): one epoch of AReaL is then training.steps steps."""
    if count is None:
        return rows
    out = list(rows)
    while len(out) < count:
        out += rows
    return out[:count]


def _filled(value: Any, run_dir: str, model_dir: str, context: int) -> Any:
    if isinstance(value, dict):
        return {k: _filled(v, run_dir, model_dir, context) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, run_dir, model_dir, context) for v in value]
    if value == AUTO:
        return context
    if isinstance(value, str):
        return value.replace("<run_dir>", run_dir).replace("<model_dir>", model_dir)
    return value


def resume_point(directory: Path, resume: bool | str) -> Path:
    """The checkpoint to resume from: the path checkpoint.resume names, else the newest complete global_step_N."""
    if isinstance(resume, str):
        path = Path(resume)
        if not boot.checkpoint_complete(path):
            raise ConfigError(f"checkpoint.resume: {path} is not a complete AReaL checkpoint saved by rlbridge")
        return path
    found = step_dirs(directory, boot.STEP_PREFIX)
    for step in sorted(found, reverse=True):
        if boot.checkpoint_complete(found[step]):
            return found[step]
    incomplete = f" (only incomplete ones: {', '.join(found[s].name for s in sorted(found))})" if found else ""
    raise ConfigError(
        f"checkpoint.resume: no complete {boot.STEP_PREFIX}* checkpoint in {directory} to resume from{incomplete}; "
        "run without --resume (or checkpoint.resume: false) to start over"
    )


def run_areal(plan, ctx) -> None:
    native = plan.native
    config = ctx.config
    run_dir, model_dir = run_and_model_dirs(ctx, native["model"]["chat_template"])
    # the environment of every AReaL process, set before anything of AReaL is imported here: AReaL's scheduler
    # starts its workers with a PYTHONPATH it builds from sys.path and the PYTHONPATH it read at import
    events = run_dir / "areal_events.jsonl"
    events.unlink(missing_ok=True)
    plan_file = run_dir / "areal_native_plan.json"
    plan_file.write_text(json.dumps(native))
    env = {
        **native["env"],
        **worker_env(
            ctx, "rlbridge_adapters.areal.boot:install", events, boot.NATIVE_ENV, plan_file, native["rewards"], run_dir
        ),
        # AReaL starts its workers and servers as `python3 ...` by name: this environment's
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    os.environ.update(env)
    if str(BOOT_DIR) not in sys.path:
        sys.path.insert(1, str(BOOT_DIR))
    os.environ[boot.PATCH_REPORT_ENV] = str(run_dir / "patches.json")
    boot.install()  # this process is AReaL's controller
    os.environ.pop(boot.PATCH_REPORT_ENV)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data, workflow = native["data"], native["workflow"]
    train_rows, longest = dataset_rows(
        load_rows(config.data.train, config, "data.train", ctx.plugins), data, tokenizer, workflow, "data.train"
    )
    count = data.get("rows")
    if count and data.get("epochs"):  # training.steps and training.epochs: whichever ends first
        count = min(count, data["epochs"] * len(train_rows))
    train_rows = exactly(train_rows, count)
    eval_rows = None
    if config.data.eval is not None:
        eval_rows, eval_longest = dataset_rows(
            load_rows(config.data.eval, config, "data.eval", ctx.plugins), data, tokenizer, workflow, "data.eval"
        )
        longest = max(longest, eval_longest)
    for name, rows in (("train", train_rows), ("eval", eval_rows)):
        if rows is not None:
            path = run_dir / "data" / f"{name}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    areal = _filled(native["config"], str(run_dir), model_dir, longest + config.rollout.max_new_tokens)
    recover_root = Path(areal["recover"]["fileroot"]).resolve()
    areal["recover"]["fileroot"] = str(recover_root)
    checkpoints = recover_root.parent
    if native["resume"]:  # checkpoint.resume, verified here: AReaL's RecoverHandler loads from its own place
        point = resume_point(checkpoints, native["resume"])
        boot.restore_step(point, recover_root)
        print(f"rlbridge: resuming from {point}, the newest complete checkpoint", flush=True)
    elif boot.areal_root(recover_root).exists():  # a killed run's unfinished save must not be resumed
        shutil.rmtree(boot.areal_root(recover_root))
    config_file = run_dir / CONFIG_FILE
    config_file.write_text(yaml.safe_dump(areal, sort_keys=False))

    from datasets import Dataset

    from areal import PPOTrainer
    from areal.api.cli_args import GRPOConfig, load_expr_config

    from rlbridge_adapters.areal.reward import WORKFLOW

    grpo, _ = load_expr_config(["--config", str(config_file)], GRPOConfig)
    workflow_kwargs = {
        "gconfig": grpo.gconfig,
        "tokenizer": model_dir,
        "use_chat_template": workflow["use_chat_template"],
        "chat_template_kwargs": workflow["chat_template_kwargs"],
    }
    follower = EventFollower(
        events,
        ctx,
        functools.partial(to_canonical, kl_ctl=float(areal["actor"]["kl_ctl"])),
        is_step,
        checkpoint_dir=str(checkpoints),
        checkpoint_glob=f"{boot.STEP_PREFIX}*",
        to_eval=eval_to_canonical,
        checkpoint_complete=boot.checkpoint_complete,
    )
    with following(follower):
        with PPOTrainer(
            grpo,
            train_dataset=Dataset.from_list(train_rows),
            valid_dataset=Dataset.from_list(eval_rows) if eval_rows is not None else None,
        ) as trainer:
            trainer.train(
                workflow=WORKFLOW,
                workflow_kwargs=workflow_kwargs,
                eval_workflow=WORKFLOW if eval_rows is not None else None,
                eval_workflow_kwargs={**workflow_kwargs, "gconfig": grpo.eval_gconfig, "evaluation": True},
                dynamic_filter_fn=native["train"]["dynamic_filter_fn"],
            )
    if follower.reward_errors:
        raise RLBridgeError(
            f"{len(follower.reward_errors)} reward call(s) failed inside AReaL (which would have trained on no reward "
            f"for those samples); first: {follower.reward_errors[0]}"
        )
