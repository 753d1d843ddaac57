"""OpenRLHF: the offline stages. algorithm.name sft -> openrlhf.cli.train_sft, dpo -> train_dpo (IPO with
--model.ipo_enable), reward_model -> train_rm (Bradley-Terry, --model.loss_type sigmoid). Flags as
OpenRLHF 0.11.2's parsers spell them (read in the installed openrlhf/cli/train_*.py); the dotted flag
names exist from 0.10.2.

One process, DeepSpeed ZeRO-0 on CPU (DS_ACCELERATOR detects the CPU; RANK/WORLD_SIZE of a world of
one, LOCAL_RANK -1 so that OpenRLHF skips torch.cuda.set_device), with the adapter's CPU patches
(patches/__init__.py). Batch semantics (docs/batch-semantics.md, one sample per row): --train.batch_size
is the mini batch (rows per optimizer update), --train.micro_batch_size the micro batch, and
--data.max_samples = steps x batch_size rows in one epoch. OpenRLHF's global_step counts optimizer
updates; rlbridge records every (batch_size / mini_batch_size)-th as one canonical step. Metrics are
read where the trainers write them, their TensorBoard scalars (train/*, eval/*).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import Capability, gpus_per_node, honoured, offline_only
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import model_path as resolved_model_path
from rlbridge.helpers import free_port
from rlbridge_adapters.openrlhf import layout

MODULES = {"sft": "openrlhf.cli.train_sft", "dpo": "openrlhf.cli.train_dpo", "reward_model": "openrlhf.cli.train_rm"}
SINCE = Version("0.10.2")  # the dotted flags this module writes
TRAINED = "model_trained"  # OpenRLHF's --ckpt.output_dir; moved to RUN_DIR/model once training ends

# native (TensorBoard scalar without its train/ or eval/ prefix) -> canonical, per stage
METRICS = {
    "sft": {"loss_mean": "loss/sft", "eval gpt_loss": "loss/sft"},
    "dpo": {
        "loss_mean": "loss/dpo",
        "eval_loss": "loss/dpo",
        "acc_mean": "dpo/accuracy",
        "chosen_reward": "dpo/reward_chosen",
        "reject_reward": "dpo/reward_rejected",
    },
    "reward_model": {"loss_mean": "loss/reward_model", "eval_loss": "loss/reward_model", "acc_mean": "rm/accuracy"},
}
COMMON = {"lr": "lr", "grad_norm": "grad_norm"}
MARGIN = {"dpo": "dpo/margin", "reward_model": "rm/margin"}


def check_stage(config: RunConfig, version: Version) -> str | None:
    if version < SINCE:
        return (
            f"rlbridge drives OpenRLHF's train_sft / train_dpo / train_rm from {SINCE} (their dotted flags); use "
            "engine_version 0.11.2"
        )
    if config.model.use_chat_template and config.algorithm.name != "sft":
        return (
            "rlbridge renders only sft rows with the chat template on OpenRLHF so far (its preference datasets take "
            "chats as message lists); set model.use_chat_template: false, or use backend: trl"
        )
    if config.model.lora is not None:
        return (
            "rlbridge does not merge OpenRLHF's LoRA adapters of the offline stages yet; remove model.lora or use "
            "backend: trl"
        )
    return None


def _check_packing(config: RunConfig) -> str | None:
    if config.offline.packing and gpus_per_node(config) == 0:
        return (
            "OpenRLHF packs samples with flash attention (GPUs only); set resources.gpus_per_node >= 1 or "
            "offline.packing: false"
        )
    return None


def capabilities() -> list[Capability]:
    return [
        honoured("offline.max_length", "data.max_len", offline_only("offline.max_length")),
        honoured(
            "offline.completion_only_loss",
            "model.pretrain_mode_enable",
            offline_only("offline.completion_only_loss"),
            note="false: --model.pretrain_mode_enable (loss on every token)",
        ),
        honoured(
            "offline.packing", "ds.packing_samples", lambda c: offline_only("offline.packing")(c) or _check_packing(c)
        ),
        honoured(
            "offline.dpo_loss", "model.ipo_enable", offline_only("offline.dpo_loss"), note="ipo: --model.ipo_enable"
        ),
        honoured("offline.dpo_beta", "model.beta", offline_only("offline.dpo_beta")),
        honoured(
            "offline.reference_model",
            "ref.model_name_or_path",
            offline_only("offline.reference_model"),
            note="default: the initial policy",
        ),
    ]


def translate_stage(config: RunConfig, version: Version) -> dict[str, Any]:
    """The native plan of an offline stage (Backend.translate_stage), for engine `version`."""
    model_path = resolved_model_path(config)
    tr, off, stage = config.training, config.offline, config.algorithm.name
    gpus = gpus_per_node(config)
    mini = config.mini_batch_samples
    micro = tr.micro_batch_size or mini
    flags: dict[str, Any] = {
        "model.model_name_or_path": "<model_dir>",
        "data.dataset": "<run_dir>/data/train.jsonl",
        "data.max_len": off.max_length,
        "data.max_samples": tr.steps * tr.batch_size if tr.steps else 10**9,
        "train.max_epochs": 1 if tr.steps else tr.epochs,
        "train.batch_size": mini,
        "train.micro_batch_size": micro,
        "train.seed": tr.seed,
        "adam.lr": tr.lr,
        "adam.weight_decay": tr.weight_decay,
        "max_norm": tr.grad_clip if tr.grad_clip is not None else 1e9,
        "lr_scheduler": {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}[tr.lr_schedule],
        "lr_warmup_ratio": (tr.warmup_steps / tr.steps) if tr.steps else 0.0,
        "ds.param_dtype": {"float16": "fp16"}.get(config.model.dtype, "bf16"),
        "logger.tensorboard_dir": "<run_dir>/tensorboard",
        "logger.logging_steps": 1,
        "ckpt.output_dir": f"<run_dir>/{TRAINED}",
        "ckpt.path": config.checkpoint.dir,
        "ckpt.max_num": config.checkpoint.keep_last or 10**6,
        "eval.steps": config.data.eval_interval * config.updates_per_step if config.data.eval is not None else -1,
    }
    layout.translate(config, flags)  # training.sharding and training.offload (adapters/openrlhf/layout.py)
    if tr.deterministic:
        flags["train.full_determinism_enable"] = True
    if tr.gradient_checkpointing:
        flags["model.gradient_checkpointing_enable"] = True
    if config.data.eval is not None:
        flags["eval.dataset"] = "<run_dir>/data/eval.jsonl"
        flags["eval.split"] = (
            "train"  # the split datasets' json loader names a file's rows (train_dpo/train_rm default: test)
        )
    # -1 (train_sft/train_dpo/train_rm's default): no step checkpoints, written out as recipes write it
    flags["ckpt.save_steps"] = (
        config.checkpoint.interval * config.updates_per_step if config.checkpoint.interval else -1
    )
    if config.checkpoint.resume:
        flags["ckpt.load_enable"] = True
    if gpus == 0:
        flags["ds.attn_implementation"] = "eager"
    if off.packing:
        flags["ds.packing_samples"] = True
    if stage == "sft":
        if config.model.use_chat_template:
            flags["data.apply_chat_template"] = True
        else:
            flags["data.input_template"] = "{}"
        flags["data.input_key"] = "prompt"
        flags["data.output_key"] = "completion"
        if not off.completion_only_loss:
            flags["model.pretrain_mode_enable"] = True
    else:
        flags.update(
            {
                "data.prompt_key": "prompt",
                "data.chosen_key": "chosen",
                "data.rejected_key": "rejected",
                "data.input_template": "{}",
            }
        )
    if stage == "dpo":
        flags["model.beta"] = off.dpo_beta
        flags["ref.model_name_or_path"] = off.reference_model or "<model_dir>"
        if off.dpo_loss == "ipo":
            flags["model.ipo_enable"] = True
    if stage == "reward_model":
        flags["model.loss_type"] = "sigmoid"
    flags.update(config.backend_options.get("openrlhf", {}))
    env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    if tr.torch_threads:
        env["OMP_NUM_THREADS"] = str(tr.torch_threads)
    return {
        "openrlhf_version": str(version),
        "stage": stage,
        "module": MODULES[stage],
        "args": argv(flags),
        "model": {"path": model_path, "chat_template": config.model.chat_template},
        "reference_model": off.reference_model,
        "updates_per_step": config.updates_per_step,
        "cpu": gpus == 0,
        "env": env,
    }


def argv(flags: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in flags.items():
        if value is True:
            out.append(f"--{key}")
        elif value is not False and value is not None:
            out += [f"--{key}", str(value)]
    return out


def _rows(rows: list[dict[str, Any]], fmt: str) -> list[dict[str, Any]]:
    if fmt != "messages":
        return rows
    # OpenRLHF's SFT dataset with --data.apply_chat_template: the prompt is every message before the
    # last, the response the last one (the completion)
    return [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in rows]


class _Recorder:
    """A stand-in for torch's SummaryWriter that OpenRLHF's trainers write their scalars to: each
    global step's train/* scalars become one canonical step (every updates_per_step-th update), each
    evaluation's eval/* scalars one eval_metrics.jsonl row."""

    def __init__(self, ctx, stage: str, per_step: int) -> None:
        self.ctx, self.stage, self.per_step = ctx, stage, per_step
        self.names = {**COMMON, **METRICS[stage]}
        self.pending: dict[tuple[str, int], dict[str, float]] = {}

    def add_scalar(self, tag: str, value: float, step: int = 0, *args: Any, **kwargs: Any) -> None:
        kind, _, name = tag.partition("/")
        key = (kind, int(step))
        for other in [k for k in self.pending if k != key]:
            self.flush(other)
        self.pending.setdefault(key, {})[name] = float(value)

    def flush(self, key: tuple[str, int]) -> None:
        kind, step = key
        native = self.pending.pop(key)
        canonical = {self.names[k]: v for k, v in native.items() if k in self.names}
        if self.stage in MARGIN and {"chosen_reward", "reject_reward"} <= set(native):
            canonical[MARGIN[self.stage]] = native["chosen_reward"] - native["reject_reward"]
        if kind == "eval":
            self.ctx.emit_eval(step // self.per_step, {f"eval/{k}": v for k, v in canonical.items()})
        elif kind == "train" and step % self.per_step == 0:
            self.ctx.emit_step(step // self.per_step, canonical, native=native)

    def close(self) -> None:
        for key in list(self.pending):
            self.flush(key)

    def flush_all(self) -> None:
        self.close()


def run_stage(plan, ctx) -> None:
    import runpy

    from rlbridge.contract.data import load_rows
    from rlbridge.contract.models import materialize_path
    from rlbridge.contract.stages import canonical_rows
    from rlbridge.engine.model_dir import run_and_model_dirs
    from rlbridge.engine.patch_report import PATCH_DIR_ENV
    from rlbridge.engine.environments import engine_env_vars
    from rlbridge_adapters.openrlhf.boot import NATIVE_ENV, PATCH_REPORT_ENV
    from rlbridge_adapters.openrlhf.train import write_jsonl

    native, config = plan.native, ctx.config
    run_dir, model_dir = run_and_model_dirs(ctx, native["model"]["chat_template"])
    train_rows: list[dict[str, Any]] = []
    for source, name in ((config.data.train, "train"), (config.data.eval, "eval")):
        if source is None:
            continue
        fmt, rows = canonical_rows(load_rows(source, config, f"data.{name}", ctx.plugins), config, f"data.{name}")
        rows = _rows(rows, fmt)
        if name == "train":
            needed = config.training.steps * config.training.batch_size if config.training.steps else len(rows)
            while len(rows) < needed:  # OpenRLHF trains on min(max_samples, rows) rows in one epoch
                rows = rows + rows
            train_rows = rows
        write_jsonl(rows, run_dir / "data" / f"{name}.jsonl")
    assert train_rows
    reference = (
        materialize_path(native["reference_model"], "offline.reference_model", ctx.plugins)
        if native["reference_model"]
        else model_dir
    )
    args = [a.replace("<run_dir>", str(run_dir)).replace("<model_dir>", model_dir) for a in native["args"]]
    if native["stage"] == "dpo":
        args[args.index("--ref.model_name_or_path") + 1] = reference
    args = [str(Path(a).resolve()) if i and args[i - 1] == "--ckpt.path" else a for i, a in enumerate(args)]
    (run_dir / "openrlhf_args.txt").write_text(" ".join(args) + "\n")
    (run_dir / "openrlhf_native_plan.json").write_text(json.dumps(native))
    env = {
        **native["env"],
        NATIVE_ENV: str(run_dir / "openrlhf_native_plan.json"),
        PATCH_DIR_ENV: os.environ.get(PATCH_DIR_ENV) or str(run_dir / "patches"),
        # a DeepSpeed world of one in this process; LOCAL_RANK -1: OpenRLHF skips torch.cuda.set_device
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "-1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    env.update(engine_env_vars(Path(sys.executable)))  # DeepSpeed's JIT-built CPU ops cached in this environment
    os.environ.update(env)
    os.environ[PATCH_REPORT_ENV] = str(run_dir / "patches.json")
    from rlbridge_adapters.openrlhf import boot

    boot.install()
    os.environ.pop(PATCH_REPORT_ENV)
    import torch.utils.tensorboard as tensorboard

    recorder = _Recorder(ctx, native["stage"], native["updates_per_step"])
    saved_writer, saved_argv = tensorboard.SummaryWriter, sys.argv
    tensorboard.SummaryWriter = lambda *a, **k: recorder  # the trainers build theirs with --logger.tensorboard_dir
    try:
        sys.argv = [native["module"], *args]
        runpy.run_module(native["module"], run_name="__main__", alter_sys=True)
    finally:
        sys.argv, tensorboard.SummaryWriter = saved_argv, saved_writer
        recorder.close()
    trained, target = run_dir / TRAINED, run_dir / "model"
    if (trained / "config.json").is_file():
        shutil.rmtree(target, ignore_errors=True)
        os.replace(trained, target)


class _Parsed(Exception):
    def __init__(self, args) -> None:
        self.args_namespace = args


def validate(native: dict[str, Any]) -> Any:
    """OpenRLHF's own parser of the stage's CLI module checks the flags (it builds its parser under
    `if __name__ == "__main__"`, so the module runs until parse_args returns; nothing trains)."""
    import argparse
    import runpy

    from rlbridge.errors import ConfigError

    from rlbridge.engine.patches import PatchKind, apply_patches
    from rlbridge_adapters.openrlhf.patches import PATCHES

    apply_patches([p for p in PATCHES if p.kind == PatchKind.CPU_ENABLEMENT], native)  # the modules import flash-attn
    args = [
        a.replace("<run_dir>", "/tmp/rlbridge-plan").replace("<model_dir>", native["model"]["path"])
        for a in native["args"]
    ]
    original, saved_argv = argparse.ArgumentParser.parse_args, sys.argv

    def parse_args(self, *a, **k):
        raise _Parsed(original(self, *a, **k))

    argparse.ArgumentParser.parse_args = parse_args
    sys.argv = [native["module"], *args]
    try:
        runpy.run_module(native["module"], run_name="__main__")
    except _Parsed as done:
        return done.args_namespace
    except SystemExit as exc:  # argparse's own error (printed on stderr)
        raise ConfigError(
            f"OpenRLHF's {native['module']} rejected the translated flags (exit {exc.code}): {' '.join(args)}"
        ) from exc
    finally:
        argparse.ArgumentParser.parse_args, sys.argv = original, saved_argv
    raise ConfigError(f"{native['module']} did not parse its arguments")
