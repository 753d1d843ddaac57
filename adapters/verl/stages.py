"""verl: the offline stage it has, SFT: algorithm.name sft -> verl.trainer.sft_trainer (the
TrainingWorker engine trainer, config sft_trainer_engine.yaml; the old fsdp_sft_trainer is gone since
0.7.1). verl has no offline DPO and no reward-model trainer, so dpo and reward_model are refused.
Every key written here was read in the installed verl 0.9.1 (verl/trainer/sft_trainer.py,
config/sft_trainer_engine.yaml, config/model/hf_model.yaml, config/engine/fsdp.yaml, optim/fsdp.yaml,
utils/dataset/multiturn_sft_dataset.py).

One process, a torch.distributed world of one (gloo, through the adapter's CPU platform on CPU:
patches/v09_cpu.py), FSDP2. Batch semantics (docs/batch-semantics.md, one sample per row): verl's SFT
step is one optimizer update of data.train_batch_size rows in micro batches of
data.micro_batch_size_per_gpu, so train_batch_size is the mini batch and verl runs
steps x (batch_size / mini_batch_size) updates; rlbridge records every (batch_size / mini_batch_size)-th
as one canonical step. Rows go to verl as chats (its MultiTurnSFTDataset puts the loss on assistant
messages): prompt/completion rows as a user and an assistant message, rendered without a chat template
(model.use_chat_template false) by a template that writes each message's text and ends the assistant's
with the EOS token, as TRL and OpenRLHF end a completion. Metrics come from verl's tracker
(train/loss, train/grad_norm, train/lr, val/loss).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
from pathlib import Path
from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import (
    Capability,
    flatten,
    gpus_per_node,
    honoured,
    offline_only,
    rejected,
    resolved_dtype,
)
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import model_path as resolved_model_path

SINCE = Version("0.9.0")  # verl.trainer.sft_trainer on the TrainingWorker engine, as driven here
MODULE = "verl.trainer.sft_trainer"
CONFIG_NAME = "sft_trainer_engine"
TRAINED = "model_trained"  # the final checkpoint's Hugging Face model, moved to RUN_DIR/model at the end
# model.use_chat_template false: each message's text as is, an assistant message ended with EOS
TEXT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
)
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# verl's tracker name (sft_trainer.fit) -> canonical
METRICS = {"train/loss": "loss/sft", "train/grad_norm": "grad_norm", "train/lr": "lr"}
EVAL_METRICS = {"val/loss": "loss/sft"}
# keys rlbridge sets as defaults rather than from a canonical knob: backend_options.verl may change them
ADAPTER_DEFAULTS = {
    "data.num_workers",
    "data.ignore_input_ids_mismatch",
    "engine.strategy",
    "engine.use_torch_compile",
    "trainer.logger",
    "trainer.project_name",
    "trainer.experiment_name",
    "+model.override_config.attn_implementation",
    "checkpoint.save_contents",
}


def check_stage(config: RunConfig, version: Version) -> str | None:
    name = config.algorithm.name
    if name == "dpo":
        return (
            "verl has no offline DPO trainer (its trainers are main_ppo for RL and sft_trainer); use backend: trl "
            "or openrlhf"
        )
    if name == "reward_model":
        return (
            "verl has no reward-model trainer (a reward model is only scored there, never trained); use backend: "
            "trl or openrlhf"
        )
    if version < SINCE:
        return (
            f"rlbridge drives verl's sft_trainer (its TrainingWorker engine) from verl {SINCE}; use engine_version "
            "0.9.1"
        )
    return None


def check_lora(config: RunConfig) -> str | None:
    if config.is_offline and config.model.lora is not None:
        return (
            "rlbridge does not merge verl's SFT LoRA adapter into RUN_DIR/model yet; remove model.lora or use "
            "backend: trl"
        )
    return None


ONE_PROCESS = "rlbridge runs verl's sft_trainer as one process (a world of one, no torchrun) so far"


def check_nodes(config: RunConfig) -> str | None:
    if config.is_offline and config.resources.nodes > 1:
        return f"{ONE_PROCESS}; set resources.nodes: 1, or use backend: trl"
    return None


def check_gpus(config: RunConfig) -> str | None:
    if config.is_offline and gpus_per_node(config) > 1:
        return f"{ONE_PROCESS}; set resources.gpus_per_node: 0 or 1, or use backend: trl"
    return None


def check_shuffle(config: RunConfig) -> str | None:
    if config.is_offline and not config.data.shuffle:
        return (
            "verl's sft_trainer always shuffles (its DistributedSampler is built with shuffle=True); "
            "remove data.shuffle: false or use backend: trl"
        )
    return None


def _check_completion_only(config: RunConfig) -> str | None:
    if not config.offline.completion_only_loss and config.model.use_chat_template:
        return (
            "verl's MultiTurnSFTDataset puts the loss on the assistant messages only, so a loss on every token "
            "needs rows without a chat template; set model.use_chat_template: false or "
            "offline.completion_only_loss: true"
        )
    return None


def _check_packing(config: RunConfig) -> str | None:
    if config.offline.packing and gpus_per_node(config) == 0:
        return (
            "verl packs rows padding-free (model.use_remove_padding, varlen attention), which needs flash "
            "attention and so a GPU; set resources.gpus_per_node: 1 or offline.packing: false"
        )
    return None


def capabilities() -> list[Capability]:
    why = "verl has no offline DPO trainer; use backend: trl or openrlhf for algorithm.name dpo"
    return [
        honoured(
            "offline.max_length",
            ("data.max_length", "data.truncation"),
            offline_only("offline.max_length"),
            note="data.truncation: right (longer rows cut at the end)",
        ),
        honoured(
            "offline.completion_only_loss",
            "launch.rows",
            lambda c: offline_only("offline.completion_only_loss")(c) or _check_completion_only(c),
            note="false: each row as one assistant message (prompt + completion), which verl's dataset trains on whole",
        ),
        honoured(
            "offline.packing",
            ("model.use_remove_padding", "data.use_dynamic_bsz", "data.max_token_len_per_gpu"),
            lambda c: offline_only("offline.packing")(c) or _check_packing(c),
        ),
        rejected("offline.dpo_loss", why),
        rejected("offline.dpo_beta", why),
        rejected("offline.reference_model", why),
    ]


def translate_stage(config: RunConfig, version: Version) -> dict[str, Any]:
    """The native plan of an offline stage (Backend.translate_stage), for engine `version`."""
    from rlbridge.errors import ConfigError

    model_path = resolved_model_path(config)

    tr, off = config.training, config.offline
    gpus = gpus_per_node(config)
    cpu = gpus == 0
    per_step = config.updates_per_step
    mini = config.mini_batch_samples
    micro = tr.micro_batch_size or mini
    o: dict[str, Any] = {
        "data.train_files": "<run_dir>/data/train.parquet",
        "data.val_files": "<run_dir>/data/eval.parquet" if config.data.eval is not None else None,
        "data.train_batch_size": mini,
        "data.micro_batch_size_per_gpu": micro,
        "data.use_dynamic_bsz": off.packing,
        "data.max_length": off.max_length,
        "data.truncation": "right",
        "data.messages_key": "messages",
        # rows tokenized message by message (verl's way); a BPE tokenizer may merge differently across the
        # prompt/completion boundary than in the whole text, which verl's sanity check would refuse
        "data.ignore_input_ids_mismatch": True,
        "model.path": "<model_dir>",
        "model.use_remove_padding": off.packing,
        "model.enable_gradient_checkpointing": tr.gradient_checkpointing,
        "engine.seed": tr.seed,
        "engine.full_determinism": tr.deterministic,
        "+engine.mixed_precision": {
            "param_dtype": DTYPES[resolved_dtype(config)],
            "reduce_dtype": "fp32",
            "buffer_dtype": "fp32",
        },
        "optim.lr": tr.lr,
        "optim.weight_decay": tr.weight_decay,
        "optim.clip_grad": tr.grad_clip if tr.grad_clip is not None else 1e9,
        "optim.lr_scheduler_type": tr.lr_schedule,
        "optim.lr_warmup_steps": tr.warmup_steps * per_step if tr.warmup_steps else -1,
        "trainer.total_training_steps": tr.steps * per_step if tr.steps else None,
        # verl stops at whichever comes first; steps alone: epochs never stop it
        "trainer.total_epochs": (tr.epochs or 100000) if tr.steps else tr.epochs,
        "trainer.test_freq": config.data.eval_interval * per_step if config.data.eval is not None else -1,
        "trainer.save_freq": (config.checkpoint.interval or 0) * per_step or -1,
        "trainer.default_local_dir": config.checkpoint.dir,
        "trainer.max_ckpt_to_keep": config.checkpoint.keep_last,
        "trainer.resume_mode": "disable"
        if not config.checkpoint.resume
        else ("auto" if config.checkpoint.resume is True else "resume_path"),
        "trainer.seed": tr.seed,
        "trainer.logger": ["console"],
        "trainer.project_name": "rlbridge",
        "trainer.experiment_name": config.run_name or "run",
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 1,
        # the final step's Hugging Face model (hf_model) is the stage's output, RUN_DIR/model
        "checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
    }
    if isinstance(config.checkpoint.resume, str):
        o["trainer.resume_from_path"] = config.checkpoint.resume
    if off.packing:
        o["data.max_token_len_per_gpu"] = off.max_length * micro
    for key, value in flatten(config.model.chat_template_kwargs).items():
        o[f"+data.apply_chat_template_kwargs.{key}"] = value
    if cpu:  # as for verl's RL plan on CPU (backend.CPU_ONLY_REASONS)
        o.update(
            {
                "trainer.device": "cpu",
                "engine.strategy": "fsdp2",
                "engine.use_torch_compile": False,
                "data.num_workers": 0,
                "+model.override_config.attn_implementation": "sdpa",
            }
        )
    for key, value in flatten(config.backend_options.get("verl", {})).items():
        bare = key.lstrip("+")
        if any(k in o and k not in ADAPTER_DEFAULTS for k in (bare, f"+{bare}")):
            raise ConfigError(
                f"backend_options.verl.{key}: rlbridge sets {bare} itself for every verl sft run; remove it"
            )
        o[key] = value
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "RLBRIDGE_SEED": str(tr.seed),
    }
    if tr.torch_threads:
        env["OMP_NUM_THREADS"] = str(tr.torch_threads)
    if tr.deterministic:
        env.update(VERL_FULL_DETERMINISM="1", PYTHONHASHSEED=str(tr.seed))
    if cpu:
        env.update(
            VERL_PLATFORM="cpu", VERL_ENGINE_DEVICE="cuda"
        )  # the CPU platform; the FSDP engine registered for cuda
    return {
        "verl_version": str(version),
        "stage": "sft",
        "module": MODULE,
        "config_name": CONFIG_NAME,
        "overrides": o,
        "model": {
            "path": model_path,
            "chat_template": config.model.chat_template if config.model.use_chat_template else TEXT_TEMPLATE,
        },
        "rows": "chat" if off.completion_only_loss else "whole",
        "seed": tr.seed,
        "updates_per_step": per_step,
        "cpu": cpu,
        "env": env,
    }


def verl_rows(rows: list[dict[str, Any]], fmt: str, whole: bool) -> list[dict[str, Any]]:
    """Canonical rows as verl's chats: prompt/completion as a user and an assistant message, or (whole,
    the loss on every token) one assistant message of prompt + completion."""
    if fmt == "messages":
        return rows
    if whole:
        return [{"messages": [{"role": "assistant", "content": r["prompt"] + r["completion"]}]} for r in rows]
    return [
        {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]}
        for r in rows
    ]


def _overrides(native: dict[str, Any], run_dir: str, model_dir: str) -> list[str]:
    from rlbridge_adapters.verl.backend import format_value

    out = []
    for key, value in native["overrides"].items():
        if isinstance(value, str):
            value = value.replace("<run_dir>", run_dir).replace("<model_dir>", model_dir)
        out.append(f"{key}={format_value(value)}")
    return out


def compose(overrides: list[str]):
    """verl's packaged sft_trainer_engine config with the plan's overrides, through Hydra as
    `python -m verl.trainer.sft_trainer` composes it (unknown keys fail here)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import verl.trainer.config as config_pkg
    from rlbridge.errors import ConfigError
    from rlbridge_adapters.verl.validate import _first_line

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=os.path.dirname(config_pkg.__file__), version_base=None):
            return hydra_compose(config_name=CONFIG_NAME, overrides=overrides)
    except Exception as exc:
        raise ConfigError(f"verl rejected the sft_trainer overrides: {_first_line(exc)}") from exc
    finally:
        GlobalHydra.instance().clear()


def validate(native: dict[str, Any]) -> Any:
    """Compose the config and build verl's own config dataclasses of the engine, optimizer and
    checkpoint (the model's needs the model itself, loaded at run time)."""
    from rlbridge.errors import ConfigError
    from rlbridge_adapters.verl.validate import _first_line

    cfg = compose(_overrides(native, "/tmp/rlbridge-plan", native["model"]["path"]))
    from verl.utils.config import omega_conf_to_dataclass

    try:
        for section in ("engine", "optim", "checkpoint"):
            omega_conf_to_dataclass(cfg[section])
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigError(f"verl's sft_trainer config checks failed: {_first_line(exc)}") from exc
    return cfg


class _Recorder:
    """verl's tracker rows (Tracking.log) as canonical steps: every updates_per_step-th update's
    train/* a step of metrics.jsonl, each val/loss one eval_metrics.jsonl row."""

    def __init__(self, ctx, per_step: int) -> None:
        self.ctx, self.per_step = ctx, per_step

    def log(self, data: dict[str, Any], step: int) -> None:
        native = {k: float(v) for k, v in data.items() if isinstance(v, int | float)}
        evals = {f"eval/{EVAL_METRICS[k]}": v for k, v in native.items() if k in EVAL_METRICS}
        if evals:
            self.ctx.emit_eval(step // self.per_step, evals)
        canonical = {METRICS[k]: v for k, v in native.items() if k in METRICS}
        if canonical and step % self.per_step == 0:
            self.ctx.emit_step(step // self.per_step, canonical, native=native)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_stage(plan, ctx) -> None:
    from rlbridge.contract.data import load_rows
    from rlbridge.contract.stages import canonical_rows
    from rlbridge.engine.model_dir import run_and_model_dirs
    from rlbridge.engine.patch_report import PATCH_DIR_ENV
    from rlbridge_adapters.verl.boot import NATIVE_ENV, PATCH_REPORT_ENV
    from rlbridge_adapters.verl.train import write_parquet

    native, config = plan.native, ctx.config
    run_dir, model_dir = run_and_model_dirs(ctx, native["model"]["chat_template"])
    base_model = config_model_dir(ctx)
    mini = native["overrides"]["data.train_batch_size"]
    for source, name in ((config.data.train, "train"), (config.data.eval, "eval")):
        if source is None:
            continue
        fmt, rows = canonical_rows(load_rows(source, config, f"data.{name}", ctx.plugins), config, f"data.{name}")
        rows = verl_rows(rows, fmt, native["rows"] == "whole")
        if name == "train":
            # verl's sampler shuffles with its own fixed seed (0): the rows' order is training.seed's
            random.Random(native["seed"]).shuffle(rows)
        # verl's loaders drop the last partial batch of train_batch_size rows (an epoch of the training rows,
        # the whole evaluation): fewer rows than one batch are repeated whole, so that there is one
        while len(rows) < mini:
            rows = rows + rows
        write_parquet(rows, run_dir / "data" / f"{name}.parquet")
    overrides = dict(native["overrides"])
    overrides["trainer.default_local_dir"] = str(Path(overrides["trainer.default_local_dir"]).resolve())
    native = {**native, "overrides": overrides}
    (run_dir / "verl_native_plan.json").write_text(json.dumps(native))
    os.environ.update(
        {
            **native["env"],
            NATIVE_ENV: str(run_dir / "verl_native_plan.json"),
            PATCH_DIR_ENV: os.environ.get(PATCH_DIR_ENV) or str(run_dir / "patches"),
            # a torch.distributed world of one in this process (what torchrun would set)
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
        }
    )
    os.environ[PATCH_REPORT_ENV] = str(run_dir / "patches.json")
    from rlbridge_adapters.verl import boot

    boot.install()
    if native["cpu"]:
        # verl picks its platform once per process (platform_manager.get_platform); this process may
        # have asked before VERL_PLATFORM was set here, and got its 'nvidia' fallback (NCCL, cuda:0)
        from verl.plugin.platform import platform_manager

        platform_manager.set_platform(platform_manager.PlatformRegistry.get("cpu")())
    args = _overrides(native, str(run_dir), model_dir)
    (run_dir / "verl_overrides.txt").write_text("\n".join(args) + "\n")
    cfg = compose(args)
    os.environ.pop(PATCH_REPORT_ENV)
    from verl.trainer import sft_trainer
    from verl.utils import tracking

    recorder = _Recorder(ctx, native["updates_per_step"])
    original = tracking.Tracking.log

    def log(self, data, step, *a, **k):
        recorder.log(data, int(step))
        return original(self, data, step, *a, **k)

    tracking.Tracking.log = log
    try:
        sft_trainer.run_sft(cfg)
    finally:
        tracking.Tracking.log = original
    _keep_trained_model(Path(overrides["trainer.default_local_dir"]), run_dir, base_model)


def config_model_dir(ctx) -> str:
    """The stage's input model directory (the builtin one built on first use): its tokenizer files go
    with the trained model, not the run's rendering template."""
    from rlbridge.contract.models import materialize_model

    return materialize_model(ctx.config, ctx.plugins)


def _keep_trained_model(checkpoints: Path, run_dir: Path, base_model: str) -> None:
    """The last checkpoint's Hugging Face model (weights and config) with the input model's tokenizer
    files, moved to RUN_DIR/model atomically (it replaces the run's template copy of the input)."""
    from rlbridge.engine.checkpoints import step_dirs

    found = step_dirs(checkpoints, "global_step_")
    if not found:
        return
    hf = found[max(found)] / "huggingface"
    if not (hf / "config.json").is_file():
        return
    trained, target = run_dir / TRAINED, run_dir / "model"
    shutil.rmtree(trained, ignore_errors=True)
    trained.mkdir()
    for item in hf.iterdir():
        if item.name.startswith(("model", "config", "generation_config")):
            shutil.copy2(item, trained / item.name)
    for item in Path(base_model).iterdir():
        if item.name.startswith(("tokenizer", "special_tokens", "chat_template", "vocab", "merges")):
            shutil.copy2(item, trained / item.name)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(trained, target)
