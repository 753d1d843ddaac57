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

from rlbridge.contract.backend import Backend, Capability, approximated, gpus_per_node, honoured, rejected
from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError
from rlbridge_adapters.openrlhf.package import DEFAULT_VERSION, DISTRIBUTION, SUPPORTED_VERSIONS

ESTIMATORS = {"grpo": "group_norm", "dr_grpo": "dr_grpo", "rloo": "rloo", "reinforce_pp": "reinforce", "ppo": "gae"}
DOTTED_SINCE = Version("0.10.2")
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
    "ds.param_dtype": "param_dtype",
    "ds.attn_implementation": "attn_implementation",
    "ds.zero_stage": "zero_stage",
    "logger.tensorboard_dir": "use_tensorboard",
    "ckpt.output_dir": "save_path",
    "ckpt.path": "ckpt_path",
    "ckpt.load_enable": "load_checkpoint",
    "ckpt.save_steps": "save_steps",
    "ckpt.max_num": "max_ckpt_num",
}


def target_version(config: RunConfig) -> Version:
    return OpenRLHFBackend.target_version(config)


def _check_algorithm(config: RunConfig) -> str | None:
    if config.algorithm.name == "dpo":
        return "the OpenRLHF adapter drives train_ppo_ray only, not train_dpo yet; use backend: trl for DPO"
    return None


def _check_adv_norm(config: RunConfig) -> str | None:
    name, norm = config.algorithm.name, config.algorithm.effective_advantage_normalization
    allowed = {"grpo": {"group", "none"}, "dr_grpo": {"none"}, "rloo": {"none"}, "reinforce_pp": {"batch"}, "ppo": {"batch"}}.get(name)
    if allowed and norm not in allowed:
        return f"OpenRLHF's {ESTIMATORS[name]} scales advantages as {' or '.join(sorted(allowed))}; set that or leave it unset"
    return None


def _check_loss_agg(config: RunConfig) -> str | None:
    agg = config.algorithm.loss_aggregation
    if agg == "seq_mean_token_sum_norm" and config.algorithm.name != "dr_grpo":
        return "OpenRLHF has seq-mean-token-sum-norm only inside its dr_grpo estimator; use algorithm.name: dr_grpo"
    if agg == "seq_mean_token_mean" and target_version(config) < Version("0.11.2"):
        return f"OpenRLHF {target_version(config)} has no --actor.loss_agg_mode (added in 0.11.2); use token_mean"
    return None


def _check_rollout(config: RunConfig) -> str | None:
    if config.rollout.engine in ("hf", "sglang"):
        return "OpenRLHF's PPO rollout is vLLM only; use rollout.engine: vllm (or auto)"
    return None


def _check_dtype(config: RunConfig) -> str | None:
    if config.model.dtype == "float32":
        return "OpenRLHF trains in bf16 or fp16 only (--ds.param_dtype); use bfloat16, float16 or auto"
    return None


def _check_environment(config: RunConfig) -> str | None:
    from rlbridge.contract.environments import environment_class

    if config.environment is None:
        return None
    if config.reward:
        return "with an environment OpenRLHF takes rewards from the agent only; move the reward into the environment or remove reward"
    if environment_class(config.environment.model_dump()).tools:
        return (
            f"environment '{config.environment.name}' has tools, and OpenRLHF's agent executor has no tool-call "
            "parsing; use backend: verl (verl tools) or an environment without tools"
        )
    return None


def _check_placement(config: RunConfig) -> str | None:
    if config.placement.policy == "colocate" and config.rollout.tensor_parallel_size > max(gpus_per_node(config), 1) * config.resources.nodes:
        return "colocated vLLM engines need tensor_parallel_size <= the actor's GPUs; lower rollout.tensor_parallel_size"
    return None


class OpenRLHFBackend(Backend):
    name = "openrlhf"
    distribution = DISTRIBUTION
    supported_versions = SUPPORTED_VERSIONS
    scores_in_engine_workers = True  # rewards are scored in Ray workers
    default_version = DEFAULT_VERSION
    description = "OpenRLHF train_ppo_ray: grpo (group_norm), dr_grpo, rloo, reinforce_pp (reinforce), ppo (gae); vLLM rollout"

    def capabilities(self) -> list[Capability]:
        return [
            honoured("algorithm.name", "--algo.advantage.estimator", _check_algorithm),
            honoured("algorithm.group_size", "--rollout.n_samples_per_prompt"),
            honoured("algorithm.kl_coef", "--algo.kl.init_coef"),
            honoured("algorithm.kl_placement", "--algo.kl.use_loss (loss; k3 estimator) / KL in the reward (k1)"),
            honoured("algorithm.clip_low", "--actor.eps_clip_low_high LOW HIGH"),
            honoured("algorithm.clip_high", "--actor.eps_clip_low_high LOW HIGH"),
            honoured("algorithm.loss_aggregation", "--actor.loss_agg_mode (0.11.2+)", _check_loss_agg),
            honoured("algorithm.advantage_normalization", "the estimator / --algo.advantage.no_std_norm", _check_adv_norm),
            honoured("algorithm.epochs_per_rollout", "--train.max_epochs"),
            rejected("algorithm.dpo_beta", "DPO is not driven by the OpenRLHF adapter yet; remove algorithm.dpo_beta"),
            honoured("model.path", "--actor.model_name_or_path"),
            approximated("model.dtype", "--ds.param_dtype", "OpenRLHF trains in bf16 or fp16; auto picks bf16",
                         check=_check_dtype, when=lambda c: c.model.dtype == "auto"),
            honoured("model.chat_template", "the model directory's chat template"),
            honoured("model.use_chat_template", "--data.apply_chat_template, else --data.input_template {}"),
            honoured("data.train", "--data.prompt_dataset (jsonl written by rlbridge)"),
            honoured("data.eval", "--eval.dataset"),
            honoured("data.prompt_key", "--data.input_key"),
            honoured("data.answer_key", "--data.label_key (the row, for the reward file)"),
            rejected("data.chosen_key", "DPO is not driven by the OpenRLHF adapter yet"),
            rejected("data.rejected_key", "DPO is not driven by the OpenRLHF adapter yet"),
            approximated("data.shuffle", "(always shuffled)", "OpenRLHF always shuffles its prompt dataset",
                         when=lambda c: not c.data.shuffle),
            honoured("rollout.engine", "vLLM engines (--vllm.num_engines)", _check_rollout),
            honoured("rollout.max_new_tokens", "--rollout.max_new_tokens"),
            approximated("rollout.max_prompt_tokens", "--data.max_len = prompt cap + max_new_tokens",
                         "OpenRLHF caps prompt + response (--data.max_len); unset, rlbridge sizes it to the longest prompt of the data",
                         when=lambda c: c.rollout.max_prompt_tokens is None),
            honoured("rollout.temperature", "--rollout.temperature"),
            honoured("rollout.top_p", "--rollout.top_p"),
            rejected("rollout.top_k", "train_ppo_ray has no top-k flag; remove rollout.top_k"),
            honoured("rollout.gpu_memory_utilization", "--vllm.gpu_memory_utilization"),
            honoured("rollout.tensor_parallel_size", "--vllm.tensor_parallel_size"),
            honoured("reward", "--train.agent_func_path <generated executor scoring the engine's token ids>"),
            approximated("environment", "--train.agent_func_path <generated AgentExecutor>",
                         "OpenRLHF's multi-turn executor gives each turn the remaining --data.max_len budget, not rollout.max_new_tokens",
                         check=_check_environment, when=lambda c: c.environment is not None),
            honoured("training.steps", "--data.max_samples = steps x batch_size, --train.num_episodes"),
            honoured("training.epochs", "--train.num_episodes"),
            honoured("training.lr", "--actor.adam.lr"),
            honoured("training.lr_schedule", "--actor.lr_scheduler constant_with_warmup / linear / cosine"),
            approximated("training.warmup_steps", "--actor.lr_warmup_ratio", "warm-up given as a ratio of the run's steps",
                         when=lambda c: c.training.warmup_steps > 0 and not c.training.steps),
            honoured("training.weight_decay", "--actor.adam.weight_decay"),
            honoured("training.batch_size", "--rollout.batch_size"),
            honoured("training.mini_batch_size", "--train.batch_size (samples)"),
            honoured("training.micro_batch_size", "--train.micro_batch_size, --rollout.micro_batch_size"),
            approximated("training.grad_clip", "--actor.max_norm", "OpenRLHF always clips; null becomes 1e9",
                         when=lambda c: c.training.grad_clip is None),
            honoured("training.seed", "--train.seed"),
            approximated("training.torch_threads", "OMP_NUM_THREADS", "sets the thread count of every OpenRLHF process",
                         when=lambda c: c.training.torch_threads is not None),
            honoured("resources.nodes", "--actor.num_nodes"),
            honoured("resources.gpus_per_node", "--actor.num_gpus_per_node (0: logical GPUs of a private Ray cluster)"),
            honoured("resources.cpus_per_node", "ray.init(num_cpus)"),
            honoured("placement.policy", "colocate: --train.colocate_all; split: vLLM engines on their own GPUs", _check_placement),
            honoured("placement.args", "(checked by the placement policy)"),
            honoured("checkpoint.dir", "--ckpt.path, --ckpt.output_dir"),
            honoured("checkpoint.interval", "--ckpt.save_steps"),
            approximated("checkpoint.resume", "--ckpt.load_enable", "OpenRLHF resumes from the newest checkpoint in --ckpt.path; a path selects that directory",
                         when=lambda c: isinstance(c.checkpoint.resume, str)),
            honoured("checkpoint.keep_last", "--ckpt.max_num"),
        ]

    def translate(self, config: RunConfig) -> dict[str, Any]:
        version = target_version(config)
        algo, tr, ro = config.algorithm, config.training, config.rollout
        gpus = gpus_per_node(config)
        devices = max(gpus, 1) * config.resources.nodes
        mini = config.mini_batch_samples
        micro = tr.micro_batch_size or max(mini // devices, 1)
        estimator = ESTIMATORS.get(algo.name, "group_norm")
        dtype = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16"}.get(config.model.dtype, "bf16")
        prompt_cap = ro.max_prompt_tokens or DEFAULT_PROMPT_TOKENS
        colocate = config.placement.policy == "colocate"
        rollout_gpus = config.placement.args.get("rollout_gpus", 1) if not colocate else 0
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
            "algo.advantage.estimator": estimator,
            "algo.kl.init_coef": algo.kl_coef,
            "actor.adam.lr": tr.lr,
            "actor.adam.weight_decay": tr.weight_decay,
            "actor.max_norm": tr.grad_clip if tr.grad_clip is not None else 1e9,
            "actor.eps_clip_low_high": [algo.clip_low, algo.clip_high if algo.clip_high is not None else algo.clip_low],
            "actor.num_nodes": config.resources.nodes,
            "actor.num_gpus_per_node": max(gpus, 1),
            "vllm.num_engines": max(devices // ro.tensor_parallel_size, 1) if colocate else max(rollout_gpus // ro.tensor_parallel_size, 1),
            "vllm.tensor_parallel_size": ro.tensor_parallel_size,
            "vllm.gpu_memory_utilization": ro.gpu_memory_utilization,
            # an agent executor, not --reward.remote_url: reward_func only sees decoded text (reward.py)
            "train.agent_func_path": "<run_dir>/rlbridge_reward.py",
            "ds.param_dtype": dtype,
            "ds.zero_stage": 0 if gpus == 0 else 2,
            "logger.tensorboard_dir": "<run_dir>/tensorboard",
            "ckpt.output_dir": "<run_dir>/model_final",
            "ckpt.path": config.checkpoint.dir,
        }
        if algo.kl_coef > 0 and algo.kl_placement == "loss":
            flags["algo.kl.use_loss"] = True
            flags["algo.kl.estimator"] = "k3"
        if algo.name == "grpo" and algo.effective_advantage_normalization == "none":
            flags["algo.advantage.no_std_norm"] = True
        if algo.loss_aggregation == "seq_mean_token_mean":
            flags["actor.loss_agg_mode"] = "seq-mean-token-mean"
        if config.model.use_chat_template:
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
        flags["actor.lr_scheduler"] = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}[tr.lr_schedule]
        if estimator == "gae":
            flags["critic.model_name_or_path"] = "<model_dir>"
            flags["critic.adam.lr"] = tr.lr
        if colocate and gpus > 0:
            # on CPU the actor and the vLLM engine get a logical GPU each: colocation would select
            # OpenRLHF's CUDA-IPC weight sync
            flags["train.colocate_all"] = True
        if config.checkpoint.interval:
            flags["ckpt.save_steps"] = config.checkpoint.interval
        if config.checkpoint.keep_last:
            flags["ckpt.max_num"] = config.checkpoint.keep_last
        if config.checkpoint.resume:
            flags["ckpt.load_enable"] = True
        if config.data.eval is not None:
            flags["eval.dataset"] = "<run_dir>/data/eval.jsonl"
        if config.environment is not None:
            # the environment's agent computes the rewards
            flags["train.agent_func_path"] = "<run_dir>/rlbridge_agent.py"
        if gpus == 0:
            flags["vllm.enforce_eager"] = True
            flags["ds.attn_implementation"] = "eager"
        passthrough = dict(config.backend_options.get("openrlhf", {}))
        for key in passthrough:
            if key.lstrip("-") in flags:
                raise ConfigError(
                    f"backend_options.openrlhf.{key} is set by rlbridge's translation of a canonical knob; set that knob instead"
                )
        flags.update({k.lstrip("-"): v for k, v in passthrough.items()})
        logical_gpus = 0 if gpus else devices + flags["vllm.num_engines"] * ro.tensor_parallel_size
        env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
        if tr.torch_threads:
            env["OMP_NUM_THREADS"] = str(tr.torch_threads)
        if gpus == 0:
            env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
        return {
            "openrlhf_version": str(version),
            "module": "openrlhf.cli.train_ppo_ray",
            "args": to_argv(flags, version),
            "model": {"path": _model_path(config), "chat_template": config.model.chat_template},
            "rewards": [r.model_dump(mode="json", exclude_none=True) for r in config.reward],
            "environment": config.environment.model_dump(mode="json") if config.environment else None,
            "data": {"prompt_key": config.data.prompt_key, "answer_key": config.data.answer_key},
            "ray": {"num_cpus": config.resources.cpus_per_node or 8, "logical_gpus": logical_gpus},
            "cpu": gpus == 0,
            "env": env,
        }

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

        validate_argv(plan.native)

    def patches(self) -> list:
        from rlbridge_adapters.openrlhf.patches import PATCHES

        return PATCHES

    def recipe_importer(self):
        """Reads openrlhf recipes for `rlbridge import` (the inverse mapping is derived from translate())."""
        from rlbridge_adapters.openrlhf.importer import OpenRLHFRecipeImporter

        return OpenRLHFRecipeImporter()

    def run(self, plan, ctx) -> None:
        from rlbridge_adapters.openrlhf.train import run_openrlhf

        run_openrlhf(plan, ctx)


def to_argv(flags: dict[str, Any], version: Version) -> list[str]:
    """Flags as an argument list in the naming of `version` (dotted from 0.10.2, flat before)."""
    argv: list[str] = []
    for key, value in flags.items():
        name = key if version >= DOTTED_SINCE else FLAT.get(key, key)
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


def _model_path(config: RunConfig) -> str:
    from rlbridge.contract.models import model_path

    return model_path(config)
