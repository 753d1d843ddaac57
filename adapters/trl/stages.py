"""TRL: the offline stages. algorithm.name sft -> SFTTrainer(SFTConfig), dpo -> DPOTrainer(DPOConfig),
reward_model -> RewardTrainer(RewardConfig) (a sequence-classification model with one output,
Bradley-Terry loss). Every config field named here was read in the installed trl 1.16.0
(trl/trainer/sft_config.py, dpo_config.py, reward_config.py) and transformers' TrainingArguments.

Batch semantics as for RL (docs/batch-semantics.md) with one sample per row: training.batch_size rows
per canonical step, mini_batch_size rows per optimizer update, micro_batch_size rows per
forward/backward (per_device_train_batch_size). TRL's global_step counts optimizer updates, so
max_steps, warmup_steps, save_steps, eval_steps and logging_steps are scaled by the updates per step.
The trained model is written to RUN_DIR/model (LoRA merged), the next pipeline stage's input.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import Capability, gpus_per_node, honoured, offline_only, resolved_dtype
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import model_path as resolved_model_path

TRAINERS = {"sft": "SFT", "dpo": "DPO", "reward_model": "Reward"}
MODEL_DIR = "model"
"""The trained model of an offline stage, in the run directory."""


def _check_reference(config: RunConfig) -> str | None:
    if config.offline.reference_model is not None and config.model.lora is not None:
        return (
            "with model.lora, TRL's DPOTrainer uses the policy with its adapter disabled as the reference; "
            "remove offline.reference_model or model.lora"
        )
    return None


def _check_packing(config: RunConfig) -> str | None:
    if config.offline.packing and gpus_per_node(config) == 0:
        # bfd packing is padding-free: rows of one sequence are kept apart by position_ids, which only
        # flash attention honours; sdpa/eager on CPU would attend across rows
        return (
            "TRL packs rows padding-free (one sequence, position_ids restart per row), which needs flash "
            "attention and so a GPU; set resources.gpus_per_node >= 1 or offline.packing: false"
        )
    return None


def capabilities() -> list[Capability]:
    return [
        honoured(
            "offline.max_length",
            "max_length",
            offline_only("offline.max_length"),
            note="truncates prompt + completion (sft) or prompt + chosen / rejected (dpo, reward_model)",
        ),
        honoured(
            "offline.completion_only_loss",
            "completion_only_loss",
            offline_only("offline.completion_only_loss"),
            note="chat rows: the last assistant message is the completion, the messages before it the prompt",
        ),
        honoured(
            "offline.packing",
            ("packing", "packing_strategy"),
            lambda c: offline_only("offline.packing")(c) or _check_packing(c),
            note="bfd packing (padding-free)",
        ),
        honoured("offline.dpo_loss", "loss_type", offline_only("offline.dpo_loss")),
        honoured("offline.dpo_beta", "beta", offline_only("offline.dpo_beta")),
        honoured(
            "offline.reference_model",
            "launch.reference_model",
            lambda c: offline_only("offline.reference_model")(c) or _check_reference(c),
            note="DPOTrainer(ref_model=...); default: a frozen copy of the initial policy",
        ),
    ]


def translate_stage(config: RunConfig, version: Version) -> dict[str, Any]:
    """SFTConfig / DPOConfig / RewardConfig kwargs and what rlbridge's launcher does, for an offline stage
    (Backend.translate_stage; the same for every supported TRL version)."""
    tr, off, stage = config.training, config.offline, config.algorithm.name
    gpus = gpus_per_node(config)
    processes = max(gpus, 1)
    per_step = config.updates_per_step
    mini = config.mini_batch_samples
    micro = tr.micro_batch_size or mini // processes
    dtype = resolved_dtype(config)
    evaluate = config.data.eval is not None
    args: dict[str, Any] = {
        "output_dir": config.checkpoint.dir,
        "max_steps": tr.steps * per_step if tr.steps else -1,
        "num_train_epochs": tr.epochs or 1,
        "learning_rate": tr.lr,
        "lr_scheduler_type": "constant_with_warmup"
        if tr.lr_schedule == "constant" and tr.warmup_steps
        else tr.lr_schedule,
        "warmup_steps": tr.warmup_steps * per_step,
        "weight_decay": tr.weight_decay,
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": mini // (micro * processes),
        "max_grad_norm": tr.grad_clip or 0.0,
        "seed": tr.seed,
        "data_seed": tr.seed,
        "full_determinism": tr.deterministic,
        "train_sampling_strategy": "random" if config.data.shuffle else "sequential",
        "logging_steps": per_step,
        "report_to": "none",
        "disable_tqdm": True,
        "eval_strategy": "steps" if evaluate else "no",
        "eval_steps": config.data.eval_interval * per_step,
        "per_device_eval_batch_size": micro,
        "save_strategy": "steps" if config.checkpoint.interval else "no",
        "save_steps": (config.checkpoint.interval or 1) * per_step,
        "save_total_limit": config.checkpoint.keep_last,
        "use_cpu": gpus == 0,
        "bf16": dtype == "bfloat16" and gpus > 0,
        "fp16": dtype == "float16" and gpus > 0,
        "model_init_kwargs": {"dtype": dtype},
        "gradient_checkpointing": tr.gradient_checkpointing,
        "max_length": off.max_length,
    }
    if config.model.chat_template_kwargs:
        args["chat_template_kwargs"] = dict(config.model.chat_template_kwargs)
    if stage == "sft":
        args["completion_only_loss"] = off.completion_only_loss
        args["packing"] = off.packing
        if off.packing:
            args["packing_strategy"] = "bfd"
    elif stage == "dpo":
        args["beta"] = off.dpo_beta
        args["loss_type"] = [off.dpo_loss]
    args.update(config.backend_options.get("trl", {}))  # refused where a knob owns it (Backend.check_backend_options)
    lora = config.model.lora
    threads = tr.torch_threads or config.resources.cpus_per_node
    return {
        "stage": stage,
        "trainer": f"{TRAINERS[stage]}Trainer",
        "config_class": f"{TRAINERS[stage]}Config",
        "args": args,
        "model": {"path": resolved_model_path(config), "dtype": dtype},
        "reference_model": off.reference_model,
        "data": {
            "prompt_key": config.data.prompt_key,
            "use_chat_template": config.model.use_chat_template,
            "chat_template": config.model.chat_template,
        },
        "lora": None
        if lora is None
        else {
            "r": lora.rank,
            "lora_alpha": lora.alpha,
            "lora_dropout": lora.dropout,
            "target_modules": lora.target_modules,
            "task_type": "SEQ_CLS" if stage == "reward_model" else "CAUSAL_LM",
        },
        "torch_threads": threads,
        "updates_per_step": per_step,
        "resume": config.checkpoint.resume,
        "env": {"TOKENIZERS_PARALLELISM": "false"},
    }


def trl_rows(rows: list[dict[str, Any]], fmt: str, native: dict[str, Any], field_name: str) -> list[dict[str, Any]]:
    """Canonical stage rows (rlbridge.contract.stages) in TRL's dataset formats: standard text, or
    conversational (lists of messages) with model.use_chat_template."""
    from rlbridge.errors import ConfigError

    chat = native["data"]["use_chat_template"]
    stage, completion_only = native["stage"], native["args"].get("completion_only_loss", True)
    out = []
    for i, row in enumerate(rows):
        if fmt == "messages":
            messages = row["messages"]
            if not completion_only:
                out.append({"messages": messages})
                continue
            if messages[-1]["role"] != "assistant":
                raise ConfigError(
                    f"{field_name}: row {i}: offline.completion_only_loss trains on the last assistant "
                    f"message, and this chat ends with a {messages[-1]['role']} message"
                )
            out.append({"prompt": messages[:-1], "completion": messages[-1:]})
        elif not chat:
            out.append(dict(row))
        else:
            user = [{"role": "user", "content": row["prompt"]}]
            answers = ("completion",) if stage == "sft" else ("chosen", "rejected")
            out.append({"prompt": user, **{k: [{"role": "assistant", "content": row[k]}] for k in answers}})
    return out


def run_stage(plan, ctx) -> None:
    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback

    import trl
    from rlbridge.contract.data import load_rows
    from rlbridge.contract.models import materialize_model, materialize_path
    from rlbridge.contract.stages import canonical_rows
    from rlbridge_adapters.trl.metrics import stage_to_canonical
    from rlbridge_adapters.trl.train import CanonicalMetrics, _latest_checkpoint, load_tokenizer, make_args

    native, config = plan.native, ctx.config
    os.environ.update(native["env"])
    if native["torch_threads"]:
        torch.set_num_threads(native["torch_threads"])
    model_path = materialize_model(config, ctx.plugins)
    tok = load_tokenizer(model_path, native["data"]["chat_template"])

    def dataset(source, field_name: str):
        fmt, rows = canonical_rows(load_rows(source, config, field_name, ctx.plugins), config, field_name)
        return Dataset.from_list(trl_rows(rows, fmt, native, field_name))

    train_ds = dataset(config.data.train, "data.train")
    eval_ds = dataset(config.data.eval, "data.eval") if config.data.eval is not None else None
    extra: dict[str, Any] = {}
    if native["lora"]:
        from peft import LoraConfig

        extra["peft_config"] = LoraConfig(**native["lora"])
    if native["reference_model"]:
        from transformers import AutoModelForCausalLM

        ref = materialize_path(native["reference_model"], "offline.reference_model", ctx.plugins)
        extra["ref_model"] = AutoModelForCausalLM.from_pretrained(ref, dtype=getattr(torch, native["model"]["dtype"]))
    callback = CanonicalMetrics(ctx, native["updates_per_step"], {})
    callback.to_canonical = stage_to_canonical(native["stage"])
    trainer = getattr(trl, native["trainer"])(
        model=model_path,
        args=make_args(native),
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tok,
        callbacks=[callback],
        **extra,
    )
    trainer.remove_callback(PrinterCallback)  # disable_tqdm prints every raw log; rlbridge shows its own progress
    resume = native["resume"]
    if resume is True:
        resume = _latest_checkpoint(native["args"]["output_dir"])
    if eval_ds is not None and not resume:
        trainer.evaluate()  # the held-out metrics before training: eval_metrics.jsonl step 0
    trainer.train(resume_from_checkpoint=resume or None)
    if eval_ds is not None and trainer.state.global_step % native["args"]["eval_steps"]:
        trainer.evaluate()  # and after the last step, when the interval did not end there
    save_model(trainer, tok, model_path, ctx.run_dir / MODEL_DIR)


def save_model(trainer, tok, source: str, target: Path) -> None:
    """The trained model (a LoRA adapter merged into its base) and its tokenizer, written to a temporary
    sibling and renamed, so a pipeline never takes half a model as its next stage's input. The tokenizer
    files are the source model's (the ones every engine environment loads) unless the run set a template."""
    model = trainer.model
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    config_file = Path(source) / "tokenizer_config.json"
    if config_file.is_file():  # keep the source's tokenizer class (transformers 5 writes one that 4.x cannot load)
        saved = json.loads((tmp / "tokenizer_config.json").read_text())
        saved["tokenizer_class"] = json.loads(config_file.read_text()).get(
            "tokenizer_class", saved.get("tokenizer_class")
        )
        if tok.chat_template:
            saved["chat_template"] = tok.chat_template
        (tmp / "tokenizer_config.json").write_text(json.dumps(saved, indent=2))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
