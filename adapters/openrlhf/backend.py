"""The OpenRLHF backend: canonical config -> the argument list of `openrlhf.cli.train_ppo_ray`.

Flags are written in 0.10.2+'s dotted names and renamed to the flat names of earlier releases
(0.10.2 renamed every flag, with no aliases). Batch semantics: rollout.batch_size = batch_size
(prompts), n_samples_per_prompt = group_size, train.batch_size = mini batch (samples),
train.micro_batch_size = micro batch (samples); OpenRLHF's step count is
len(prompts) x n / train.batch_size x epochs, so rlbridge feeds exactly steps x batch_size prompts.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from rlbridge.contract.backend import (
    Backend,
    flatten,
    gpus_per_node,
    launch_settings,
)
from rlbridge.contract.config import RunConfig
from rlbridge.contract.models import model_path
from rlbridge.errors import ConfigError
from rlbridge_adapters.openrlhf import asynchrony, knobs, layout, stages

ESTIMATORS = {
    "grpo": "group_norm",
    "dr_grpo": "dr_grpo",
    "rloo": "rloo",
    "reinforce_pp": "reinforce",
    "reinforce_pp_baseline": "reinforce_baseline",
    "ppo": "gae",
}
DOTTED_SINCE = Version("0.10.2")
KEEP_ALL = 2**31 - 1  # --ckpt.max_num for checkpoint.keep_last: null
DEFAULT_PROMPT_TOKENS = 1024  # what --check validates an "auto" cap with
MAX_LEN_AUTO = "auto"

# dotted (0.10.2+) -> flat (before 0.10.2); checked against each version's own parser by the
# conformance suite (tests/conformance, run in each OpenRLHF environment by `rlbridge compat run`).
FLAT = {
    "actor.model_name_or_path": "pretrain",
    "critic.model_name_or_path": "critic_pretrain",
    "reward.remote_url": "remote_rm_url",
    "train.agent_func_path": "agent_func_path",
    "data.prompt_dataset": "prompt_data",
    "data.input_key": "input_key",
    "data.label_key": "label_key",
    "data.input_template": "input_template",
    "data.apply_chat_template": "apply_chat_template",
    "data.max_len": "max_len",
    "data.max_samples": "max_samples",
    "eval.dataset": "eval_dataset",
    "eval.steps": "eval_steps",
    "rollout.max_new_tokens": "max_new_tokens",
    "rollout.temperature": "temperature",
    "rollout.top_p": "top_p",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "rollout.batch_size": "rollout_batch_size",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "algo.advantage.estimator": "advantage_estimator",
    "algo.advantage.no_std_norm": "no_advantage_std_norm",
    "algo.kl.init_coef": "init_kl_coef",
    "algo.kl.use_loss": "use_kl_loss",
    "algo.kl.estimator": "kl_estimator",
    "actor.num_nodes": "actor_num_nodes",
    "actor.num_gpus_per_node": "actor_num_gpus_per_node",
    "actor.adam.lr": "actor_learning_rate",
    "actor.adam.weight_decay": "l2",
    "actor.lr_warmup_ratio": "lr_warmup_ratio",
    "actor.lr_scheduler": "lr_scheduler",
    "actor.max_norm": "max_norm",
    "actor.eps_clip_low_high": "eps_clip_low_high",
    "critic.adam.lr": "critic_learning_rate",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm.enforce_eager": "enforce_eager",
    "train.colocate_all": "colocate_all_models",
    "train.batch_size": "train_batch_size",
    "train.micro_batch_size": "micro_train_batch_size",
    "train.max_epochs": "max_epochs",
    "train.num_episodes": "num_episodes",
    "train.seed": "seed",
    "train.full_determinism_enable": "full_determinism",
    "ds.param_dtype": "param_dtype",
    "ds.attn_implementation": "attn_implementation",
    "ds.zero_stage": "zero_stage",
    # the training layout's (layout.py), read in v0.9.10's and v0.10.1's train_ppo_ray.py
    "ds.adam_offload": "adam_offload",
    "ds.zpg": "zpg",
    "ds.tensor_parallel_size": "ds_tensor_parallel_size",
    "ref.offload": "ref_reward_offload",  # the reward model's too, when OpenRLHF runs one
    "logger.tensorboard_dir": "use_tensorboard",
    "ckpt.output_dir": "save_path",
    "ckpt.path": "ckpt_path",
    "ckpt.load_enable": "load_checkpoint",
    "ckpt.save_steps": "save_steps",
    "ckpt.max_num": "max_ckpt_num",
}


DOTTED = {flat: dotted for dotted, flat in FLAT.items()}


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def target_version(config: RunConfig) -> Version:
    return OpenRLHFBackend.target_version(config)


def _chat_tools(config: RunConfig) -> list[dict[str, Any]] | None:
    """The environment's tool schemas for the chat template, which OpenRLHF applies without tools:
    rlbridge then renders the prompts itself (--data.input_template {}). None without tools, or
    without a chat template (the prompt's own text is then all the policy sees of them, as on TRL)."""
    from rlbridge.contract.environments import environment_class, tool_schemas

    if config.environment is None or not config.model.use_chat_template:
        return None
    return tool_schemas(environment_class(config.environment.model_dump())) or None


class OpenRLHFBackend(Backend):
    name = "openrlhf"
    scores_in_engine_workers = True  # rewards are scored in Ray workers
    # OpenRLHF's Ray actor classes (LLMRayActor: the vLLM engine before 0.10); placement read-back
    actor_roles = {
        "PolicyModelActor": ("actor",),
        "ReferenceModelActor": ("reference",),
        "CriticModelActor": ("critic",),
        "RewardModelActor": ("reward",),
        "RolloutRayActor": ("rollout",),
        "LLMRayActor": ("rollout",),
    }
    native_key_spelling = "dotted flags of `train_ppo_ray` (renamed to the flat spelling on versions before 0.10.2)"
    description = (
        "OpenRLHF train_ppo_ray: grpo (group_norm), dr_grpo, rloo, reinforce_pp (reinforce), reinforce_pp_baseline "
        "(reinforce_baseline), ppo (gae); vLLM rollout"
    )

    def translate(self, config: RunConfig) -> dict[str, Any]:
        version = target_version(config)
        algo, tr, ro = config.algorithm, config.training, config.rollout
        gpus = gpus_per_node(config)
        mini = config.mini_batch_samples
        # train.micro_batch_size is per data-parallel rank, train.batch_size global (layout.py)
        micro = tr.micro_batch_size or max(mini // layout.data_parallel_size(config), 1)
        estimator = ESTIMATORS.get(algo.name, "group_norm")
        dtype = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16"}.get(config.model.dtype, "bf16")
        prompt_cap = ro.max_prompt_tokens or DEFAULT_PROMPT_TOKENS
        colocate = config.placement.policy == "colocate"
        # on CPU (gpus 0) resources.cpu_ranks_per_node logical training GPUs per node, whatever the policy
        actor_gpus = layout.training_devices(config)
        flags: dict[str, Any] = {
            "actor.model_name_or_path": "<model_dir>",
            "data.prompt_dataset": "<run_dir>/data/train.jsonl",
            "data.input_key": "prompt",
            "data.label_key": "label",
            # prompt + response cap; without a prompt cap, sized to the data's longest prompt at launch
            "data.max_len": prompt_cap + ro.max_new_tokens if ro.max_prompt_tokens else MAX_LEN_AUTO,
            "rollout.max_new_tokens": ro.max_new_tokens,
            "rollout.temperature": ro.temperature,
            "rollout.top_p": ro.top_p,
            "rollout.n_samples_per_prompt": algo.group_size,
            "rollout.batch_size": tr.batch_size,
            "rollout.micro_batch_size": micro,
            "train.batch_size": mini,
            "train.micro_batch_size": micro,
            "train.max_epochs": algo.epochs_per_rollout,
            "train.seed": tr.seed,
            "train.full_determinism_enable": tr.deterministic,
            "algo.advantage.estimator": estimator,
            "algo.kl.init_coef": algo.kl_coef,
            "actor.adam.lr": tr.lr,
            "actor.adam.weight_decay": tr.weight_decay,
            "actor.max_norm": tr.grad_clip if tr.grad_clip is not None else 1e9,
            "actor.eps_clip_low_high": [algo.clip_low, algo.clip_high if algo.clip_high is not None else algo.clip_low],
            "actor.num_nodes": config.resources.nodes,
            "actor.num_gpus_per_node": actor_gpus // config.resources.nodes,
            "vllm.num_engines": layout.vllm_engines(config),
            "vllm.tensor_parallel_size": ro.tensor_parallel_size,
            "vllm.gpu_memory_utilization": ro.gpu_memory_utilization,
            # an agent executor, not --reward.remote_url: reward_func only sees decoded text (reward.py)
            "train.agent_func_path": "<run_dir>/rlbridge_reward.py",
            "ds.param_dtype": dtype,
            "logger.tensorboard_dir": "<run_dir>/tensorboard",
            "ckpt.output_dir": "<run_dir>/model_final",
            "ckpt.path": config.checkpoint.dir,
        }
        if algo.kl_coef > 0 and algo.kl_placement == "loss":
            flags["algo.kl.use_loss"] = True
        if algo.name == "grpo" and algo.effective_advantage_normalization == "none":
            flags["algo.advantage.no_std_norm"] = True
        if algo.loss_aggregation == "seq_mean_token_mean":
            flags["actor.loss_agg_mode"] = "seq-mean-token-mean"
        chat_tools = _chat_tools(config)
        if config.model.use_chat_template and not config.model.chat_template_kwargs and not chat_tools:
            flags["data.apply_chat_template"] = True
        else:
            flags["data.input_template"] = "{}"
        if tr.steps:
            flags["data.max_samples"] = tr.steps * tr.batch_size
            flags["train.num_episodes"] = 1
        else:
            flags["train.num_episodes"] = tr.epochs
        # OpenRLHF's default warm-up is 3 % of the run: always say it
        flags["actor.lr_warmup_ratio"] = (tr.warmup_steps / tr.steps) if tr.steps else 0.0
        flags["actor.lr_scheduler"] = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}[
            tr.lr_schedule
        ]
        if knobs.engine_reward_model(config):  # OpenRLHF's own reward-model actors score instead of the executor
            del flags["train.agent_func_path"]
            flags["reward.model_name_or_path"] = knobs.engine_reward_model(config)
        layout.translate(config, flags)
        role_gpus = knobs.translate(config, flags, version)
        asynchrony.translate(config, flags)
        if colocate and gpus > 0:
            # on CPU the actor and the vLLM engine get a logical GPU each: colocation would select
            # OpenRLHF's CUDA-IPC weight sync
            flags["train.colocate_all"] = True
        if config.checkpoint.interval:
            flags["ckpt.save_steps"] = config.checkpoint.interval
        # keep_last null keeps every checkpoint (OpenRLHF's own default keeps 3)
        flags["ckpt.max_num"] = config.checkpoint.keep_last or KEEP_ALL
        if config.checkpoint.resume:
            flags["ckpt.load_enable"] = True
        flags["eval.steps"] = -1  # no evaluation (OpenRLHF's default, said)
        if config.data.eval is not None:
            flags["eval.dataset"] = "<run_dir>/data/eval.jsonl"
            flags["eval.steps"] = config.data.eval_interval
            if version >= Version("0.11.2"):  # evaluation samples as training does (OpenRLHF's default: 0.6, 4 samples)
                flags["eval.temperature"] = ro.temperature
                flags["eval.n_samples_per_prompt"] = algo.group_size
        if config.environment is not None:
            # the environment's agent computes the rewards
            flags["train.agent_func_path"] = "<run_dir>/rlbridge_agent.py"
        if gpus == 0:
            flags["vllm.enforce_eager"] = True
            flags["ds.attn_implementation"] = "eager"
        # flat or dotted, nested or not: one key each (knob-owned keys were refused by Backend.check_backend_options)
        passthrough = self.option_keys(config.backend_options.get("openrlhf", {}))
        for key in passthrough:
            if key in flags:
                raise ConfigError(
                    f"backend_options.openrlhf.{key}: rlbridge sets --{key} itself for every OpenRLHF run; remove it"
                )
        flags.update(passthrough)
        logical_gpus = 0 if gpus else actor_gpus + flags["vllm.num_engines"] * ro.tensor_parallel_size + role_gpus
        env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
        if tr.torch_threads:
            env["OMP_NUM_THREADS"] = str(tr.torch_threads)
        if tr.deterministic:  # the base of the per-request vLLM seeds (patches/determinism.py)
            env["RLBRIDGE_SEED"] = str(tr.seed)
        if gpus == 0:
            env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
        return {
            "openrlhf_version": str(version),
            "module": "openrlhf.cli.train_ppo_ray",
            "args": to_argv(flags, version),
            "model": {"path": model_path(config), "chat_template": config.model.chat_template},
            "rewards": [r.model_dump(mode="json", exclude_none=True) for r in config.reward],
            "environment": config.environment.model_dump(mode="json") if config.environment else None,
            "data": {
                "prompt_key": config.data.prompt_key,
                "answer_key": config.data.answer_key,
                # prompts rlbridge drops (over max_prompt_tokens) or renders (template arguments) itself
                "drop_over": ro.max_prompt_tokens if ro.drop_overlong_prompts else None,
                "chat_template_kwargs": dict(config.model.chat_template_kwargs) or None,
                "tools": chat_tools,
            },
            "ray": {
                "address": config.resources.ray_address,
                "num_cpus": config.resources.cpus_per_node or 8,
                "logical_gpus": logical_gpus,
            },
            "cpu": gpus == 0,
            "env": env,
        }

    native_aliases = {
        "actor.eps_clip": "algorithm.clip_low",
        "algo.advantage.gamma": "algorithm.name",
        "rollout.top_k": "rollout.top_k",
        "data.input_key": "data.prompt_key",
        "data.label_key": "data.answer_key",
        "data.prompt_dataset": "data.train",
        "actor.model_name_or_path": "model.path",
        "ckpt.output_dir": "checkpoint.dir",
    }

    def native_settings(self, plan) -> dict[str, Any]:
        """The flags of the argument list in 0.10.2+'s dotted names (whatever the version's spelling),
        values parsed back to numbers; what rlbridge's launcher does as launch.*."""
        argv = plan.native["args"]
        settings: dict[str, Any] = {}
        i = 0
        while i < len(argv):
            j = i + 1
            while j < len(argv) and not argv[j].startswith("--"):
                j += 1
            values = [_number(v) for v in argv[i + 1 : j]]
            settings[DOTTED.get(argv[i][2:], argv[i][2:])] = (
                True if not values else values[0] if len(values) == 1 else values
            )
            i = j
        settings.update(launch_settings(plan.native, skip=("args", "module")))
        return settings

    def option_keys(self, options: dict[str, Any]) -> dict[str, Any]:
        """backend_options.openrlhf with flat (pre-0.10.2) and dotted spellings as one dotted key, nested
        mappings flattened the way the CLI spells them (--algo.kl.init_coef), never a dict string."""
        return {DOTTED.get(key.lstrip("-"), key.lstrip("-")): value for key, value in flatten(options).items()}

    def render_native(self, plan) -> str:
        native = plan.native
        lines = [f"# OpenRLHF {native['openrlhf_version']}: python -m {native['module']} \\"]
        argv = native["args"]
        i = 0
        while i < len(argv):
            j = i + 1
            while j < len(argv) and not argv[j].startswith("--"):
                j += 1
            lines.append("    " + " ".join(_shell(a) for a in argv[i:j]) + (" \\" if j < len(argv) else ""))
            i = j
        return "\n".join(lines)

    def validate(self, plan) -> None:
        from rlbridge_adapters.openrlhf.validate import validate_argv

        if plan.native.get("stage"):
            stages.validate(plan.native)
            return

        validate_argv(plan.native)

    def run(self, plan, ctx) -> None:
        from rlbridge_adapters.openrlhf.train import run_openrlhf

        run_openrlhf(plan, ctx)


def to_argv(flags: dict[str, Any], version: Version) -> list[str]:
    """Flags as an argument list in the naming of `version` (dotted from 0.10.2, flat before)."""
    argv: list[str] = []
    for key, value in flags.items():
        name = key if version >= DOTTED_SINCE else FLAT.get(key, knobs.FLAT.get(key, key))
        if value is True:
            argv.append(f"--{name}")
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            argv += [f"--{name}", *(str(v) for v in value)]
        else:
            argv += [f"--{name}", str(value)]
    return argv


def _shell(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
