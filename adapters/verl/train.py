"""Running a verl plan in this (engine) process: data, model directory, private Ray cluster, main_ppo.

Every verl process, Ray workers included, runs rlbridge's bootstrap at start-up (the Ray engines'
sitecustomize on PYTHONPATH, rlbridge.engine.ray_engine): it applies the version-gated patches, registers
the rlbridge reward manager and copies each step's metrics from verl's tracker into an events file,
which this process follows and turns into canonical metrics.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

from rlbridge.contract.data import load_rows
from rlbridge.engine.checkpoints import step_dirs, tensors_complete
from rlbridge.errors import ConfigError
from rlbridge.engine.follower import EventFollower, following
from rlbridge.engine.model_dir import run_and_model_dirs
from rlbridge.engine.ray_cluster import ray_cluster
from rlbridge.engine.ray_engine import worker_env
from rlbridge_adapters.verl.backend import AGENT_LOOP_FILE, AGENT_NAME, TOOL_CONFIG_FILE
from rlbridge_adapters.verl.boot import NATIVE_ENV, PATCH_REPORT_ENV
from rlbridge_adapters.verl.metrics import eval_to_canonical, to_canonical
from rlbridge_adapters.verl.validate import check_config, compose, overrides_for

AGENT_LOOP_CLASS = "rlbridge_adapters.verl.agent_loop.EnvironmentAgentLoop"
TOOL_CLASS = "rlbridge_adapters.verl.tools.EnvironmentTool"


def to_verl_rows(rows: list[dict[str, Any]], prompt_key: str, answer_key: str, split: str) -> list[dict[str, Any]]:
    """verl's RLHFDataset format: a chat prompt, the answer as reward_model.ground_truth, and the
    whole original row (as JSON) in extra_info for the reward plugins' metadata."""
    out = []
    for i, row in enumerate(rows):
        out.append(
            {
                "data_source": "rlbridge",
                "prompt": [{"role": "user", "content": row[prompt_key]}],
                "ability": "rlbridge",
                "reward_model": {"style": "rule", "ground_truth": str(row.get(answer_key, ""))},
                "extra_info": {"split": split, "index": i, "rlbridge_row": json.dumps(row, default=str)},
            }
        )
    return out


def longest_prompt(rows: list[dict[str, Any]], model_dir: str) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    longest = 1
    for row in rows:
        ids = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        longest = max(longest, len(ids))
    return longest


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)


def write_agent_loop_files(native: dict[str, Any], run_dir: Path) -> None:
    """The agent-loop config naming rlbridge's environment loop, and the verl tool config for the
    environment's tools (YAML is a superset of JSON; verl reads both with OmegaConf). Written before
    verl is imported here, so the class paths are strings."""
    agent_loops = [
        {"name": AGENT_NAME, "_target_": AGENT_LOOP_CLASS, "environment_json": json.dumps(native["environment"])}
    ]
    (run_dir / AGENT_LOOP_FILE).write_text(json.dumps(agent_loops, indent=2))
    if native["tools"]:
        tools = [
            {"class_name": TOOL_CLASS, "config": {"type": "native"}, "tool_schema": schema}
            for schema in native["tools"]
        ]
        (run_dir / TOOL_CONFIG_FILE).write_text(json.dumps({"tools": tools}, indent=2))


def checkpoint_complete(path: Path) -> bool:
    """verl saves a step's actor (and critic) shards, then the data loader's state (data.pt), then
    the tracker file: a global_step_N whose data.pt and every tensor file are whole was saved to the end."""
    return tensors_complete(path, ["data.pt", "actor/*"])


def resume_point(directory: Path) -> Path:
    """The newest complete global_step_N in `directory`. Chosen here and passed to verl as
    resume_from_path instead of verl's own choice (its tracker file, written with a plain write, which a
    kill can leave empty, and which names a step without checking its files)."""
    found = step_dirs(directory, "global_step_")
    for step in sorted(found, reverse=True):
        if checkpoint_complete(found[step]):
            return found[step]
    incomplete = f" (only incomplete ones: {', '.join(found[s].name for s in sorted(found))})" if found else ""
    raise ConfigError(
        f"checkpoint.resume: no complete global_step_* checkpoint in {directory} to resume from{incomplete}; "
        "run without --resume (or checkpoint.resume: false) to start over"
    )


def verl_worker_env(cfg) -> dict[str, str]:
    """The environment variables verl's main_ppo sets for its Ray workers (its `ray.init` runtime env),
    less those already set here, as verl itself filters them."""
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    try:
        runtime_env = get_ppo_ray_runtime_env(cfg)  # verl >= 0.9 reads the config
    except TypeError:
        runtime_env = get_ppo_ray_runtime_env()
    return {k: str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}


def run_verl(plan, ctx) -> None:
    native = plan.native
    config = ctx.config
    run_dir, model_dir = run_and_model_dirs(ctx, native["model"]["chat_template"])

    data = native["data"]
    train_rows = to_verl_rows(
        load_rows(config.data.train, config, "data.train", ctx.plugins), data["prompt_key"], data["answer_key"], "train"
    )
    if config.data.eval is not None:
        val_rows = to_verl_rows(
            load_rows(config.data.eval, config, "data.eval", ctx.plugins),
            data["prompt_key"],
            data["answer_key"],
            "test",
        )
    else:
        val_rows = train_rows[: max(1, min(len(train_rows), config.training.batch_size))]  # verl requires val files
    write_parquet(train_rows, run_dir / "data" / "train.parquet")
    write_parquet(val_rows, run_dir / "data" / "val.parquet")
    if native.get("environment"):
        write_agent_loop_files(native, run_dir)
    os.environ[PATCH_REPORT_ENV] = str(run_dir / "patches.json")
    os.environ[NATIVE_ENV] = str(run_dir / "verl_native_plan.json")
    (run_dir / "verl_native_plan.json").write_text(json.dumps(native))
    from rlbridge_adapters.verl import boot

    boot.install()  # this process too: it imports verl to compose the config and runs the driver
    prompt_cap = longest_prompt(train_rows + val_rows, model_dir)
    native["overrides"]["trainer.default_local_dir"] = str(
        Path(native["overrides"]["trainer.default_local_dir"]).resolve()
    )
    if native["overrides"].get("trainer.resume_mode") == "auto":  # checkpoint.resume: true, verified here
        point = resume_point(Path(native["overrides"]["trainer.default_local_dir"]))
        native["overrides"].update({"trainer.resume_mode": "resume_path", "trainer.resume_from_path": str(point)})
        print(f"rlbridge: resuming from {point}, the newest complete checkpoint", flush=True)
    overrides = overrides_for(native, str(run_dir), model_dir, max_prompt_length=prompt_cap)
    cfg = compose(overrides, native.get("entry_point"))
    check_config(cfg)
    (run_dir / "verl_overrides.txt").write_text("\n".join(overrides) + "\n")

    os.environ.pop(PATCH_REPORT_ENV)
    events = run_dir / "verl_events.jsonl"
    events.unlink(missing_ok=True)
    env = {
        **native["env"],
        **worker_env(
            ctx,
            "rlbridge_adapters.verl.boot:install",
            events,
            NATIVE_ENV,
            run_dir / "verl_native_plan.json",
            native["rewards"],
            run_dir,
        ),
    }
    # what verl's main_ppo gives its Ray workers when it starts Ray itself (rlbridge starts it first, so
    # main_ppo skips that): its defaults for variables not already set, e.g. VLLM_LOGGING_LEVEL=WARN
    env = {**verl_worker_env(cfg), **env}
    os.environ.update(env)

    ray_native = native["ray"]
    follower = EventFollower(
        events,
        ctx,
        to_canonical,
        is_step=lambda native: any(k.startswith(("actor/", "critic/", "timing_s/")) for k in native),
        checkpoint_dir=cfg.trainer.default_local_dir,
        checkpoint_glob="global_step_*",
        to_eval=eval_to_canonical,
        checkpoint_complete=checkpoint_complete,
    )
    # verl's resource pools always ask for GPUs; verl 0.5 bundles also ask for a resource named 'cpu'
    resources = {"cpu": ray_native["num_cpus"]} if ray_native["cpu_resource"] else None
    with (
        following(follower),
        ray_cluster(
            ray_native["num_cpus"],
            env,
            ray_native["logical_gpus"] or 0,
            resources,
            run_dir=run_dir,
            address=ray_native.get("address"),
        ),
    ):
        # main_ppo, or the async entry point (asynchrony.py); Hydra's main runs the task directly when given
        # a composed config
        main = importlib.import_module(native.get("entry_point") or "verl.trainer.main_ppo").main
        main(cfg)
