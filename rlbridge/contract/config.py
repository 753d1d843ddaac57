"""The canonical run configuration.

One YAML file, any engine. Every field is typed, defaulted and documented here, where it is
declared; `rlbridge schema` writes the JSON Schema generated from these models. Unknown keys are
errors. Cross-field rules that hold for every engine (group size, batch divisibility) are checked
here; what a particular engine can or cannot honour is the backend's capability table
(`rlbridge.contract.backend`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, model_validator

from rlbridge.contract.launchers import LauncherConfig
from rlbridge.contract.strict_model import StrictModel

OFFLINE_STAGES = ("sft", "dpo", "reward_model")  # train on fixed rows: no rollout, no reward (docs/stages.md)
GROUP_ALGORITHMS = (
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_pp_baseline",
)  # advantage from a group of samples of one prompt


class AlgorithmConfig(StrictModel):
    name: Literal[
        "grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo", "sft", "dpo", "reward_model"
    ] = "grpo"
    """Training stage. RL: grpo: group-normalised advantages; dr_grpo: GRPO without std scaling and with
    length-unbiased aggregation; rloo: leave-one-out baseline; reinforce_pp: REINFORCE++ (batch
    baseline); reinforce_pp_baseline: REINFORCE++-baseline (the group's mean reward as baseline, then
    advantages normalised over the batch); ppo: critic with GAE. Offline stages (fixed rows, no rollout
    and no reward; their knobs are in `offline`, docs/stages.md): sft: supervised fine-tuning on
    prompt/completion or chat-message rows; dpo: direct preference optimisation on prompt/chosen/rejected
    rows; reward_model: a Bradley-Terry pairwise reward model (sequence classification, one output) on
    prompt/chosen/rejected rows."""
    group_size: int = Field(8, ge=1)
    """Samples generated per prompt (TRL num_generations, verl rollout.n, OpenRLHF
    n_samples_per_prompt). Group-based algorithms need at least 2."""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the KL penalty against the reference (initial) policy. 0 disables it and no
    reference model is loaded."""
    kl_placement: Literal["loss", "reward"] = "loss"
    """Where the KL penalty goes: 'loss' adds it to the policy loss (GRPO style), 'reward'
    subtracts it from the reward before advantages (PPO/RLOO style)."""
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    """Lower PPO ratio clip epsilon: the ratio is clipped at 1 - clip_low (so below 1)."""
    clip_high: float | None = Field(None, ge=0.0)
    """Upper PPO ratio clip epsilon (DAPO clip-higher), at least clip_low. None means the same as clip_low."""
    loss_aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] = "token_mean"
    """How per-token losses become one number: token_mean averages over every token of the batch
    (DAPO), seq_mean_token_mean averages per sequence then over sequences (original GRPO),
    seq_mean_token_sum_norm sums per sequence and divides by a constant length (Dr. GRPO)."""
    advantage_normalization: Literal["group", "batch", "none"] | None = None
    """Divide advantages by the reward std of the group, of the whole batch, or not at all.
    None: the algorithm's standard (grpo: group; dr_grpo and rloo: none; reinforce_pp, reinforce_pp_baseline and ppo: batch)."""

    @property
    def effective_advantage_normalization(self) -> str:
        if self.advantage_normalization is not None:
            return self.advantage_normalization
        return {"grpo": "group", "reinforce_pp": "batch", "reinforce_pp_baseline": "batch", "ppo": "batch"}.get(
            self.name, "none"
        )

    epochs_per_rollout: int = Field(1, ge=1)
    """Passes of policy updates over one batch of rollouts (TRL num_iterations, verl ppo_epochs)."""
    kl_estimator: Literal["k1", "k2", "k3"] | None = None
    """Per-token estimator of the KL to the reference policy: k1 (log-ratio), k2 (half the squared
    log-ratio), k3 (exp(-r) + r - 1, low variance; verl calls it low_var_kl). None: the placement's
    standard, k3 with kl_placement loss and k1 with kl_placement reward."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus (the policy's mean token entropy is subtracted from the loss times
    this); 0 disables it (verl actor.entropy_coeff, OpenRLHF --actor.entropy_coef, TRL entropy_coef)."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount factor of returns (ppo: GAE; reinforce_pp: discounted return). 1.0: no discount."""
    gae_lambda: float = Field(1.0, ge=0.0, le=1.0)
    """ppo only: lambda of generalised advantage estimation (1.0: Monte-Carlo return minus value)."""
    dynamic_sampling: bool = False
    """Drop groups in which every sample got the same reward (they carry no learning signal) and draw
    more prompts until the batch is full (DAPO dynamic sampling). Group-based algorithms only."""
    rollout_correction: Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = "none"
    """Correct the mismatch between the rollout engine's and the trainer's log-probabilities (e.g. vLLM
    vs FSDP) with importance weights pi_train / pi_rollout, per token or per sequence: truncate clips
    the weight at rollout_correction_threshold (truncated importance sampling), mask drops the tokens or
    sequences whose weight exceeds it. 'none' trains on the rollout as if it were exactly on-policy."""
    rollout_correction_threshold: float = Field(2.0, gt=1.0)
    """Upper bound of the importance weight used by rollout_correction."""

    @model_validator(mode="after")
    def _check_algorithm(self) -> "AlgorithmConfig":
        if self.clip_high is not None and self.clip_high < self.clip_low:
            raise ValueError(
                f"clip_high ({self.clip_high}) is below clip_low ({self.clip_low}): the upper clip must be at least "
                "the lower one (DAPO clip-higher); raise clip_high or leave it unset"
            )
        if self.name == "dr_grpo":
            if (
                "loss_aggregation" not in self.model_fields_set
            ):  # dr_grpo's own, written out (a dumped config loads again)
                object.__setattr__(self, "loss_aggregation", "seq_mean_token_sum_norm")
            elif self.loss_aggregation != "seq_mean_token_sum_norm":
                raise ValueError(
                    f"loss_aggregation: dr_grpo is defined by seq_mean_token_sum_norm, not {self.loss_aggregation}; "
                    "leave loss_aggregation unset or use name: grpo"
                )
            if self.advantage_normalization not in (None, "none"):
                raise ValueError(
                    "advantage_normalization: dr_grpo does not scale advantages by std "
                    f"({self.advantage_normalization}); "
                    "leave it unset (none) or use name: grpo"
                )
        return self


class LoraConfig(StrictModel):
    rank: int = Field(8, ge=1)
    """Rank r of the low-rank update (TRL/peft r, verl lora_rank, OpenRLHF --ds.lora.rank)."""
    alpha: int = Field(16, ge=1)
    """Scaling numerator: the update is scaled by alpha / rank."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA input."""
    target_modules: Union[Literal["all-linear"], list[str]] = "all-linear"
    """Modules that get an adapter: 'all-linear' (every linear layer but the output head) or a list of
    module names (e.g. [q_proj, v_proj])."""


class ModelConfig(StrictModel):
    path: str = "builtin:tiny-digits"
    """Policy model: a local directory, a hub id (org/name; needs network access), or
    'builtin:NAME' for a model that a model-builder plugin creates locally on first use."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "auto"
    """Parameter dtype. 'auto' is float32 on CPU and bfloat16 on GPU."""
    chat_template: str | None = None
    """Jinja chat template to set on the tokenizer (a template string or a path to a file).
    None keeps the tokenizer's own."""
    use_chat_template: bool = False
    """Wrap prompts as a user message and apply the chat template. False sends the prompt text as is."""
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra variables for the chat template when prompts are rendered (e.g. {enable_thinking: false}
    for Qwen3). Needs use_chat_template: true."""
    lora: LoraConfig | None = None
    """Train a LoRA adapter instead of every weight; None trains the full model. Checkpoints then
    hold the adapter."""

    @model_validator(mode="after")
    def _template_is_used(self) -> "ModelConfig":
        if self.chat_template is not None and not self.use_chat_template:
            raise ValueError(
                "chat_template is set but use_chat_template is false, so no template is applied: "
                "set use_chat_template: true or remove chat_template"
            )
        return self


class DataSource(StrictModel):
    type: Literal["jsonl", "parquet", "hf_disk", "hf", "generator"]
    """jsonl/parquet: a file; hf_disk: a dataset saved with datasets.save_to_disk; hf: a dataset that
    datasets.load_dataset loads by name (a hub id, or a local directory of data files in a hub dataset's
    layout), through the Hugging Face cache (HF_HOME, HF_DATASETS_CACHE) and its offline mode
    (HF_DATASETS_OFFLINE, HF_HUB_OFFLINE); generator: a data-source plugin (see `rlbridge plugins`) that
    makes rows procedurally."""
    path: str | list[str] | None = None
    """File or directory for jsonl, parquet and hf_disk; for jsonl and parquet also a list of files, whose rows are
    read one file after the other (verl's data.train_files=[gsm8k.parquet, math.parquet])."""
    name: str | None = None
    """type generator: the plugin's name; type hf: the dataset, as datasets.load_dataset takes it (a hub id
    such as 'openai/gsm8k', or a local directory of data files)."""
    split: str | None = None
    """hf_disk and hf: which split (default: train)."""
    config: str | None = None
    """type hf: the dataset's configuration (load_dataset's second argument, e.g. 'main' for openai/gsm8k);
    None for a dataset that has one."""
    revision: str | None = None
    """type hf: the dataset repository's revision (a branch, tag or commit); None for its default branch.
    A commit makes the run reproducible."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the generator plugin."""
    limit: int | None = Field(None, ge=1)
    """Keep at most this many rows."""

    @model_validator(mode="after")
    def _check_source(self) -> "DataSource":
        if self.type != "hf" and (self.config is not None or self.revision is not None):
            raise ValueError(f"'config' and 'revision' are only for type 'hf' (a hub dataset), not '{self.type}'")
        if self.type in ("generator", "hf"):
            if not self.name:
                raise ValueError(
                    "type 'generator' needs 'name' (a data-source plugin; see `rlbridge plugins`)"
                    if self.type == "generator"
                    else "type 'hf' needs 'name' (the dataset: a hub id such as 'openai/gsm8k' or a local directory)"
                )
            if self.path:
                raise ValueError(f"type '{self.type}' takes 'name', not 'path'")
            if self.type == "generator" and self.split is not None:
                raise ValueError("'split' is only for types 'hf' and 'hf_disk' (a generator makes one set of rows)")
            if self.type == "hf" and self.args:
                raise ValueError("'args' is only for type 'generator' (type 'hf' takes name, config, split, revision)")
        else:
            if self.split is not None and self.type != "hf_disk":
                raise ValueError(
                    f"'split' is only for types 'hf' and 'hf_disk' (a dataset has splits; a {self.type} file has none)"
                )
            if not self.path:
                raise ValueError(f"type '{self.type}' needs 'path' (the file or directory to read)")
            if isinstance(self.path, list) and self.type == "hf_disk":
                raise ValueError("type 'hf_disk' takes one directory in 'path' (a list is for jsonl and parquet files)")
            if self.name:
                raise ValueError(f"'name' is only for types 'generator' and 'hf', not '{self.type}'")
            if self.args:
                raise ValueError(f"'args' is only for type 'generator', not '{self.type}'")
        return self


class DataConfig(StrictModel):
    train: DataSource = Field(
        default_factory=lambda: DataSource(type="generator", name="digit_copy", args={"num_rows": 1024})
    )
    """Training prompts."""
    eval: DataSource | None = None
    """Evaluation prompts; None for no evaluation."""
    eval_interval: int = Field(10, ge=1)
    """With data.eval: evaluate every this many training steps (TRL eval_steps, verl trainer.test_freq,
    OpenRLHF --eval.steps)."""
    prompt_key: str = "prompt"
    """Column holding the prompt text."""
    answer_key: str = "answer"
    """Column holding the reference answer given to reward plugins (may be absent for rewards that need none)."""
    shuffle: bool = True
    """Shuffle training rows (seeded by training.seed)."""

    @model_validator(mode="after")
    def _eval_interval_needs_eval(self) -> "DataConfig":
        # compared with the default, not "was it set": a dumped config.yaml must load again
        if self.eval is None and self.eval_interval != type(self).model_fields["eval_interval"].default:
            raise ValueError(
                "eval_interval is set but there is no data.eval to evaluate on: add data.eval or remove eval_interval"
            )
        return self


class RolloutConfig(StrictModel):
    engine: Literal["auto", "hf", "vllm", "sglang"] = "auto"
    """Generation engine: hf (transformers generate), vllm, sglang. 'auto' lets the backend pick the
    one it runs best here (TRL: hf; verl: hf up to 0.5, vllm from 0.6); the plan shows the choice."""
    max_new_tokens: int = Field(256, ge=1)
    """Cap on generated tokens per sample (TRL max_completion_length, verl max_response_length)."""
    max_prompt_tokens: int | None = Field(None, ge=1)
    """Prompts longer than this are an error at data loading (see drop_overlong_prompts). None: no cap."""
    drop_overlong_prompts: bool = False
    """Drop prompts longer than max_prompt_tokens (counted after the chat template) from the data
    instead of stopping with an error. Needs max_prompt_tokens."""
    temperature: float = Field(1.0, gt=0.0)
    """Sampling temperature."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold; 1.0 disables it."""
    top_k: int = Field(0, ge=0)
    """Top-k sampling; 0 disables it."""
    gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    """vllm/sglang only: fraction of accelerator memory for the inference engine's KV cache."""
    tensor_parallel_size: int = Field(1, ge=1)
    """vllm/sglang only: tensor-parallel degree of the inference engine."""
    data_parallel_size: int | None = Field(None, ge=1)
    """vllm/sglang only: inference engines (replicas) generating side by side, each on
    tensor_parallel_size devices (OpenRLHF --vllm.num_engines, verl's rollout replicas, TRL vllm-serve
    --data-parallel-size). None: every rollout device divided by tensor_parallel_size."""
    # (declared in this order so that a backend without an async loop names partial_rollouts and
    # weight_sync_interval themselves when it refuses them, before max_staleness)
    partial_rollouts: bool = False
    """With max_staleness >= 1: a weight sync pauses in-flight generations, which then continue with the
    new weights, so one sample's tokens may come from two policies (its staleness counts the version it
    started with). False: a sync waits until in-flight generations finish (OpenRLHF
    --train.partial_rollout_enable, verl async_training.partial_rollout)."""
    weight_sync_interval: int = Field(1, ge=1)
    """With max_staleness >= 1: training steps between weight syncs to the rollout engine (TRL
    weight_sync_steps, verl async_training.trigger_parameter_sync_step). The synchronous loop syncs
    after every step (1)."""
    max_staleness: int = Field(0, ge=0)
    """How far generation may run ahead of training, in policy versions (the rollout engine's weights
    advance one version per weight sync, every weight_sync_interval training steps). 0: the synchronous
    loop (generate, score, update, sync, repeat), unchanged. k >= 1: the engine's asynchronous loop
    generates while the trainer updates, and a sample may come from a policy up to k versions older than
    the one it trains (TRL AsyncGRPOConfig.max_staleness, with max_inflight_tasks and queue_maxsize sized
    so that at most k versions' samples are generated ahead; OpenRLHF --train.async_enable with
    --train.async_queue_size k, verl fully_async_policy async_training.staleness_threshold; see
    docs/scale.md for each engine's loop)."""

    @model_validator(mode="after")
    def _async_knobs_need_async(self) -> "RolloutConfig":
        # compared with the defaults, not "was it set": a dumped config.yaml must load again
        if self.max_staleness == 0:
            if self.partial_rollouts:
                raise ValueError(
                    "rollout.partial_rollouts needs rollout.max_staleness >= 1 (the synchronous loop has "
                    "no generation in flight at a weight sync)"
                )
            if self.weight_sync_interval != 1:
                raise ValueError(
                    "rollout.weight_sync_interval needs rollout.max_staleness >= 1 (the synchronous loop "
                    "syncs after every step; skipping syncs makes samples stale)"
                )
        return self


class RewardSpec(StrictModel):
    name: str = ""
    """Reward plugin name (see `rlbridge plugins`). With `native`, the name its metrics are logged
    under (default: the function's name)."""
    weight: float = 1.0
    """Weight of this reward in the total."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the plugin's factory (with `native`: to the function on every call)."""
    native: str | None = None
    """Use a reward function written in this backend's calling convention, unchanged, on any backend
    (each backend declares its engine's: Backend.native_reward_convention): verl
    compute_score(data_source, solution_str, ground_truth, extra_info); OpenRLHF
    reward_func(queries, prompts, labels); TRL f(prompts, completions, **kwargs). See docs/plugins.md."""
    function: str | None = None
    """With `native`: the function, as FILE.py:NAME (relative to the config file) or package.module:NAME."""
    model: str | None = None
    """A reward model instead of a function: a sequence-classification model with one output (a
    directory, a hub id, or builtin:NAME such as builtin:tiny-reward) whose score of prompt +
    completion is the reward. Each backend runs it in its own reward-model machinery where it has
    one (see `rlbridge backends`). `name` (default: the model's directory name) names its metrics."""

    @model_validator(mode="after")
    def _plugin_or_native(self) -> "RewardSpec":
        if self.model is not None:
            if self.native is not None or self.function is not None:
                raise ValueError(
                    "a reward entry is a plugin (name), a native function (native + function) or a model, not several"
                )
            if not self.name:
                object.__setattr__(self, "name", self.model.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1])
        elif self.native is not None:
            if not self.function or ":" not in self.function:
                raise ValueError(f"a native: {self.native} reward needs function: FILE.py:NAME or package.module:NAME")
            if not self.name:
                object.__setattr__(self, "name", self.function.rsplit(":", 1)[1].rsplit(".", 1)[-1])
        elif self.function is not None:
            raise ValueError(
                "'function' needs 'native' (the backend whose calling convention the function is written in)"
            )
        elif not self.name:
            raise ValueError(
                "a reward entry needs 'name' (a reward plugin, see `rlbridge plugins`), 'native' + 'function', or "
                "'model'"
            )
        return self


class EnvironmentSpec(StrictModel):
    name: str
    """Environment plugin name (multi-turn, tools)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment factory."""
    max_turns: int = Field(1, ge=1)
    """Maximum number of assistant turns per episode."""


class OffloadConfig(StrictModel):
    """training.offload: what of the training state lives in CPU memory between uses. The critic
    follows the policy; the reference model follows `parameters` unless `reference` says otherwise."""

    parameters: bool = False
    """The policy's (and the critic's) parameters and gradients (FSDP CPUOffload, verl
    fsdp_config.param_offload, DeepSpeed ZeRO-3 offload_param)."""
    optimizer: bool = False
    """The optimizer states (verl fsdp_config.optimizer_offload, DeepSpeed offload_optimizer: OpenRLHF
    --ds.adam_offload)."""
    reference: bool | None = None
    """The reference model's parameters (it has no gradients or optimizer; verl
    ref.fsdp_config.param_offload, OpenRLHF --ref.offload). None: as `parameters`."""


class TrainingConfig(StrictModel):
    steps: int | None = Field(100, ge=1)
    """Training steps; one step is one rollout batch plus its policy updates."""
    epochs: int | None = Field(None, ge=1)
    """Passes over the training data, instead of steps (steps is then null). Both set: stop at whichever
    comes first, as verl's total_training_steps beside total_epochs; TRL (max_steps overrides
    num_train_epochs) and OpenRLHF refuse both."""
    lr: float = Field(1e-6, gt=0.0)
    """Peak learning rate of AdamW."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate schedule after warm-up."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up, in training steps."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    batch_size: int = Field(8, ge=1)
    """Global batch, in prompts per training step (each yields algorithm.group_size samples); in an
    offline stage (sft, dpo, reward_model), in rows (a dpo/reward_model row is one preference pair)."""
    mini_batch_size: int | None = Field(None, ge=1)
    """Samples per optimizer update (global). None: the whole rollout batch in one update.
    Must be a multiple of group_size and divide batch_size x group_size."""
    micro_batch_size: int | None = Field(None, ge=1)
    """Samples per forward/backward pass on one device. None: the per-device share of a mini batch."""
    forward_micro_batch_size: int | None = Field(None, ge=1)
    """Samples per forward-only pass on one device, for the log-probs of the rollout policy and of the
    reference (verl log_prob_micro_batch_size_per_gpu, OpenRLHF --rollout.micro_batch_size); these
    passes keep no activations, so recipes make them larger. None: the training micro batch."""
    grad_clip: float | None = Field(1.0, gt=0.0)
    """Clip the global gradient norm to this value; None disables clipping."""
    seed: int = 0
    """Seed for model init, data order and sampling."""
    torch_threads: int | None = Field(None, ge=1)
    """CPU only: torch intra-op threads. None keeps torch's default."""
    deterministic: bool = False
    """Two runs of the same config and seed give the same metrics, step for step, on the same machine
    and environment: the engine's own determinism switches (deterministic torch algorithms, per-request
    vLLM sampling seeds, a fixed order of requests and reward workers) on top of training.seed. Slower;
    what each engine does, and what stays out of reach, is in docs/reproducibility.md."""
    on_nonfinite: Literal["fail", "warn"] = "fail"
    """What a NaN or infinite metric (loss, reward, grad norm...) does. Either way metrics.jsonl
    records it as null, names it in the row's `nonfinite` list, the console shows it and step hooks
    receive the value itself. fail: stop the run once it happens training.nonfinite_steps steps in a
    row; warn: go on."""
    nonfinite_steps: int = Field(1, ge=1)
    """Consecutive steps with a non-finite metric after which on_nonfinite: fail stops the run."""
    max_restarts: int = Field(0, ge=0)
    """Restarts after a retryable failure (a process of the run killed or OOM-killed, a dead Ray actor
    or vLLM engine, a collective timeout, a hang; docs/faults.md lists which kinds are), each from the
    last complete checkpoint in the same output_dir (needs checkpoint.interval). The engine then runs
    in a process of its own, so that a restart starts it afresh. Once spent, the run fails with the
    last cause. 0: a failure fails the run."""
    restart_backoff_s: float = Field(10.0, ge=0.0)
    """Seconds before the first restart, doubled before each further one (at most 600)."""
    hang_first_step_s: float | None = Field(1800.0, gt=0.0)
    """Hang watchdog: a run (or a restart) whose first step takes longer than this is hung. None turns
    the watchdog off."""
    hang_factor: float = Field(5.0, gt=1.0)
    """Hang watchdog, after the first step: a run is hung when no step came for this many times the
    longest interval between two steps so far (at least training.hang_min_s)."""
    hang_min_s: float = Field(600.0, gt=0.0)
    """Hang watchdog: the shortest bound after the first step, in seconds."""
    on_hang: Literal["restart", "fail"] = "restart"
    """What a hang does once its stacks are written: restart (while training.max_restarts allows;
    else it fails) or fail."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of storing them (less memory, ~30 % more
    compute), for the policy and, with ppo, the critic."""
    max_tokens_per_device: int | None = Field(None, ge=1)
    """Dynamic batching: pack micro batches up to this many tokens (prompt + response) per device
    instead of a fixed number of samples (verl use_dynamic_bsz, OpenRLHF --train.dynamic_batch_enable).
    None: micro batches of training.micro_batch_size samples."""
    sequence_packing: bool = False
    """Remove padding: concatenate the samples of a micro batch into one sequence for the forward and
    backward passes (verl use_remove_padding, OpenRLHF --ds.packing_samples)."""
    sequence_parallel_size: int = Field(1, ge=1)
    """Split each sequence across this many devices (verl Ulysses, OpenRLHF ring attention); 1: off."""
    # --- the training layout (docs/scale.md): one block, validated together against the training devices ---
    strategy: Literal["auto", "fsdp", "deepspeed", "megatron"] = "auto"
    """How the policy (and the reference and critic, which follow it) is trained across devices: fsdp
    (PyTorch FSDP2: verl actor.strategy fsdp2, TRL through accelerate's FSDP plugin), deepspeed (DeepSpeed
    ZeRO: OpenRLHF, TRL through accelerate), megatron (Megatron-Core with tensor, pipeline and expert
    parallelism: verl). auto: the engine's own choice (TRL: DDP through accelerate, one process per
    training device; verl: fsdp; OpenRLHF: deepspeed)."""
    sharding: Literal["auto", "none", "optimizer", "gradients", "parameters"] = "auto"
    """What is partitioned across the data-parallel ranks rather than kept whole on each: none (DDP,
    ZeRO-0), optimizer (optimizer states: ZeRO-1), gradients (and optimizer states: ZeRO-2, FSDP
    SHARD_GRAD_OP), parameters (and the rest: ZeRO-3, FSDP FULL_SHARD). auto: the strategy's default on
    the engine (OpenRLHF: ZeRO-2 on GPUs, 0 on CPU; fsdp: parameters; TRL's DDP: none)."""
    shard_group_size: int | None = Field(None, ge=1)
    """Hybrid sharding: shard within groups of this many data-parallel ranks and replicate across the
    groups (FSDP HYBRID_SHARD, verl fsdp_size, DeepSpeed ZeRO++ hpZ), e.g. the GPUs of one node. Must
    divide the data-parallel size. None: one group of every data-parallel rank."""
    offload: OffloadConfig = Field(default_factory=OffloadConfig)
    """Training state kept in CPU memory between uses instead of on the device (slower, less device
    memory)."""
    tensor_parallel_size: int = Field(1, ge=1)
    """Split each layer's weights across this many devices (Megatron tensor_model_parallel_size,
    DeepSpeed AutoTP: OpenRLHF --ds.tensor_parallel_size); 1: off. The rollout's own is
    rollout.tensor_parallel_size."""
    pipeline_parallel_size: int = Field(1, ge=1)
    """Split the layers into this many stages on different devices (Megatron
    pipeline_model_parallel_size); 1: off."""
    expert_parallel_size: int = Field(1, ge=1)
    """Spread a mixture-of-experts model's experts over this many devices (Megatron
    expert_model_parallel_size); 1: off. Must divide the training devices of one pipeline stage."""

    @property
    def model_parallel_size(self) -> int:
        """Devices one copy of the model is split over (tensor x pipeline x sequence parallel); the
        data-parallel size is the training devices divided by this."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.sequence_parallel_size

    @model_validator(mode="after")
    def _steps_or_epochs(self) -> "TrainingConfig":
        if self.epochs is not None and "steps" not in self.model_fields_set:
            # epochs alone replace the default step count; steps and epochs both set are two stop conditions
            object.__setattr__(self, "steps", None)
        if self.steps is None and self.epochs is None:
            raise ValueError("set 'steps' or 'epochs'")
        return self


class CriticConfig(StrictModel):
    path: str | None = None
    """The value model's initial weights: a directory, hub id or builtin model like model.path. None:
    the same as the policy (model.path); its output head is replaced by a fresh value head."""
    lr: float | None = Field(None, gt=0.0)
    """Critic learning rate; None: training.lr."""
    value_clip: float = Field(0.5, gt=0.0)
    """PPO value clip: the new value may move at most this far from the rollout's value in the loss."""
    warmup_steps: int = Field(0, ge=0)
    """Train only the critic for the first N training steps (the policy is frozen meanwhile)."""
    micro_batch_size: int | None = Field(None, ge=1)
    """Samples per critic forward/backward on one device; None: training.micro_batch_size."""


class ResourcesConfig(StrictModel):
    nodes: int = Field(1, ge=1)
    """Number of machines."""
    gpus_per_node: Union[Annotated[int, Field(ge=0)], Literal["auto"]] = "auto"
    """Accelerators per node; 0 runs on CPU. 'auto' counts the visible NVIDIA GPUs."""
    cpu_ranks_per_node: int = Field(1, ge=1)
    """On CPU (gpus_per_node 0): training processes per node, each a logical device and one rank of
    the training layout (gloo collectives), as the engines' own CPU paths run several ranks. 1: one
    training process. Ignored with GPUs, where every GPU is a rank (so it must keep its default there)."""
    cpus_per_node: int | None = Field(None, ge=1)
    """CPU cores per node for the engine's workers; None: all of them."""
    ray_address: str | None = None
    """Address of an existing Ray cluster to run on (its GCS `HOST:PORT`), for Ray engines (verl,
    OpenRLHF). None: `RAY_ADDRESS` from the environment if set, else a private single-machine Ray
    cluster that this run starts and stops. `resources.nodes` > 1 needs a cluster that spans them.
    rlbridge only connects to and disconnects from a cluster it did not start; it never stops it."""


class PlacementConfig(StrictModel):
    policy: str = "colocate"
    """Placement policy plugin: 'colocate' puts actor, rollout and reference on the same devices;
    'split' gives rollout its own devices (see `rlbridge plugins`)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments for the placement policy (e.g. rollout_gpus for 'split')."""


class TelemetrySink(StrictModel):
    name: str
    """Telemetry sink plugin (see `rlbridge plugins`)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the sink."""


class TelemetryConfig(StrictModel):
    sinks: list[TelemetrySink] = Field(default_factory=list)
    """Extra sinks. metrics.jsonl and summary.json in output_dir are always written."""
    progress: bool = True
    """Show a progress bar with the live reward."""
    samples_per_step: int = Field(4, ge=0)
    """Sampled prompt/completion/reward rows kept per training step (samples.jsonl in output_dir and
    the sinks' tables); 0 keeps none. They come from where the engine scores rewards."""


class CheckpointConfig(StrictModel):
    dir: str | None = None
    """Where checkpoints go; None: output_dir/checkpoints."""
    interval: int = Field(0, ge=0)
    """Save every this many training steps; 0 saves none."""
    resume: Union[bool, str] = False
    """True resumes from the newest complete checkpoint in dir (a half-written one is never used);
    'auto' does so when dir holds checkpoints and starts afresh otherwise; a path resumes from that
    checkpoint. `rlbridge train CONFIG --resume` sets it to true."""
    keep_last: int | None = Field(None, ge=1)
    """Keep only the newest N checkpoints; None keeps all."""


class RolloutWorkersConfig(StrictModel):
    """Where reward plugins (and environment steps) run inside the engine's processes, and what a
    faulty plugin costs (docs/rollout-workers.md)."""

    mode: Literal["process", "inline", "ray"] = "process"
    """process: a pool of spawned worker processes per engine process (a hang is killed at timeout_s,
    a crash is contained; plugins that declare isolate=False, such as the built-in string rewards,
    are scored in the engine process and start no pool); inline: in the engine process itself (for
    debuggers; faults are still counted, but a hang cannot be interrupted); ray: num_workers Ray actors
    of ray_num_cpus each, on the nodes that offer the custom resource ray_resource (CPU-only nodes)
    when the cluster has any, else anywhere, with the same timeouts and fault handling (a hung actor
    is killed and replaced). Needs a Ray engine (verl, OpenRLHF): the actors join the run's cluster."""
    ray_resource: str = "rollout_cpu"
    """mode ray: the custom Ray resource that marks CPU-only nodes for rollout work (`ray start
    --resources '{"rollout_cpu": 16}'`; rlbridge's KubeRay CPU worker group sets it). Each actor asks
    for ray_num_cpus of it, so they land there; a cluster without it gets the actors anywhere."""
    ray_num_cpus: float = Field(1.0, gt=0.0)
    """mode ray: CPUs (and units of ray_resource) each reward actor reserves."""
    num_workers: int = Field(2, ge=1)
    """Worker processes per engine process that scores (TRL: the trainer; verl: each reward-loop
    worker; OpenRLHF: each vLLM actor)."""
    timeout_s: float = Field(30.0, gt=0.0)
    """Wall-clock limit of one call (one batch of samples of one plugin); past it the worker is killed
    and replaced, and the batch's samples count as reward/timeouts."""
    batch_size: int = Field(32, ge=1)
    """Samples per call to a worker: larger batches cost less per sample, smaller ones lose less to a
    timeout and spread over more workers."""
    batch_wait_ms: float = Field(5.0, ge=0.0)
    """Calls smaller than batch_size that arrive within this many milliseconds of each other are sent
    to a worker as one batch (verl 0.9 scores one sample per call, many at once); 0 sends each alone."""
    max_concurrency: int | None = Field(None, ge=1)
    """Calls of one plugin in flight at once, over all callers (e.g. a remote API's rate limit); None: num_workers.
    On TRL's asynchronous loop (rollout.max_staleness >= 1) they are threads of TRL's rollout process, which
    scores that many calls at once without worker processes (docs/scale.md, TRL's asynchronous trainer)."""
    on_error: Literal["fail", "zero", "skip"] = "zero"
    """What a faulty score becomes (the plugin raised, timed out, crashed its worker, returned NaN/inf,
    a non-number or the wrong number of scores): fail stops the run with the error and the row; zero
    scores it 0.0; skip leaves the plugin out of that sample's total. Always counted (reward/errors,
    reward/timeouts, reward/crashes, reward/nonfinite, reward/invalid) and logged with the failing row."""
    error_threshold: float = Field(0.5, ge=0.0, le=1.0)
    """With zero or skip: the run fails once more than this fraction of the samples scored so far (at
    least 16) had a fault, rather than training on a reward that is broken everywhere. 1.0 never fails."""


class OfflineConfig(StrictModel):
    """Knobs of the offline stages (algorithm.name sft, dpo, reward_model); each keeps its default
    otherwise. Learning rate, schedule, steps/epochs, batches, LoRA and the chat template are the
    common knobs of `training` and `model`."""

    max_length: int = Field(1024, ge=8)
    """Tokens per training sequence: prompt + completion (sft), prompt + chosen and prompt + rejected
    (dpo, reward_model); longer ones are truncated at the end (TRL max_length, OpenRLHF --max_len,
    verl data.max_length)."""
    completion_only_loss: bool = True
    """sft: the loss covers the completion (prompt/completion rows) or the assistant messages (chat
    rows) only; False trains on every token, prompt included."""
    packing: bool = False
    """sft: concatenate rows into sequences of max_length tokens (fewer, fuller sequences; attention
    does not cross rows where the engine supports it) instead of one padded sequence per row."""
    dpo_loss: Literal["sigmoid", "ipo"] = "sigmoid"
    """dpo: the preference loss: sigmoid (the DPO paper's -log sigmoid(beta x margin)) or ipo (squared
    distance of the margin from 1/(2 beta), IPO)."""
    dpo_beta: float = Field(0.1, gt=0.0)
    """dpo: beta, the strength of the implicit KL constraint to the reference model (for ipo, its tau)."""
    reference_model: str | None = None
    """dpo: the reference policy (a directory, hub id or builtin:NAME). None: a frozen copy of the
    initial policy (model.path)."""


# the training layout block (docs/scale.md): how a model is sharded and split over devices, every one of them in
# every backend's capability table (each adapter's layout.py)
LAYOUT_KNOBS = (
    "training.strategy",
    "training.sharding",
    "training.shard_group_size",
    "training.offload",
    "training.tensor_parallel_size",
    "training.pipeline_parallel_size",
    "training.expert_parallel_size",
    "rollout.data_parallel_size",
    "resources.cpu_ranks_per_node",
)
# offline stage -> the offline knobs it uses (the others must keep their defaults)
OFFLINE_KNOBS = {
    "sft": ("max_length", "completion_only_loss", "packing"),
    "dpo": ("max_length", "dpo_loss", "dpo_beta", "reference_model"),
    "reward_model": ("max_length",),
}
# knobs of RL only: an offline stage has no rollout, reward, group or critic (each must keep its default)
RL_ONLY = (
    "algorithm.group_size",
    "algorithm.kl_coef",
    "algorithm.kl_placement",
    "algorithm.clip_low",
    "algorithm.clip_high",
    "algorithm.loss_aggregation",
    "algorithm.advantage_normalization",
    "algorithm.epochs_per_rollout",
    "algorithm.kl_estimator",
    "algorithm.entropy_coef",
    "algorithm.gamma",
    "algorithm.gae_lambda",
    "algorithm.dynamic_sampling",
    "algorithm.rollout_correction",
    "algorithm.rollout_correction_threshold",
    "rollout",
    "reward",
    "environment",
    "critic",
)


def _default_of(model: type[BaseModel], dotted: str) -> Any:
    parts = dotted.split(".")
    for part in parts[:-1]:
        model = model.model_fields[part].annotation
    return model.model_fields[parts[-1]].get_default(call_default_factory=True)


def _dumped(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_dumped(v) for v in value]
    return value


class RunConfig(StrictModel):
    backend: str = "trl"
    """Engine to run on: trl, verl, openrlhf (see `rlbridge backends`)."""
    run_name: str | None = None
    """Name of the run; default: the config file's stem."""
    output_dir: str = "runs/{run_name}"
    """Where the run writes its resolved config, plan, metrics.jsonl, summary.json and plot.
    '{run_name}' is replaced."""
    engine_env: str = "auto"
    """Which Python environment runs the engine: 'auto' (this one when it has a supported version of
    the engine, at engine_version if set; else the rlbridge engine environment, see `rlbridge env`),
    'current' (this one, or an error), or a path to a Python environment."""
    engine_version: str | None = None
    """Engine version (or environment label from compat_matrix/engines.yaml, e.g. '1.16.0-vllm') to
    run on with engine_env: auto. None: any supported version here, else the recipe's default."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """RL algorithm and its loss."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """Policy model and tokenizer."""
    data: DataConfig = Field(default_factory=DataConfig)
    """Training and evaluation data."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Generation of samples."""
    plugins: list[str] = Field(default_factory=list)
    """Plugin modules to load without packaging (as pytest's -p): paths of .py files (relative to the
    config file) or importable module names. They register through the same hooks as installed
    plugins, in this process and in every engine process of the run. CLI: -p/--plugin."""
    reward: list[RewardSpec] = Field(default_factory=list)
    """Reward plugins (or native reward functions); the total reward is their weighted sum."""
    environment: EnvironmentSpec | None = None
    """Optional environment plugin for multi-turn episodes and tools."""
    rollout_workers: RolloutWorkersConfig = Field(default_factory=RolloutWorkersConfig)
    """Worker processes that run reward plugins in the engine's processes, timeouts and the fault policy."""
    critic: CriticConfig = Field(default_factory=CriticConfig)
    """The value model of algorithm ppo (the only algorithm with a critic); leave it unset otherwise."""
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    """Optimisation, batches and length of training."""
    offline: OfflineConfig = Field(default_factory=OfflineConfig)
    """Knobs of the offline stages sft, dpo and reward_model (algorithm.name)."""
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    """Machines, GPUs and CPUs."""
    launcher: LauncherConfig = Field(default_factory=LauncherConfig)
    """Batch systems `rlbridge submit --to slurm|kuberay` submits to: partition, image, retries."""
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    """Where actor, rollout and reference run."""
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """Metric sinks and progress display."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Saving and resuming."""
    backend_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Explicit pass-through of engine-native keys, per engine: backend_options.trl.<GRPOConfig field>,
    backend_options.verl.<hydra key>, backend_options.openrlhf.<flag>. Applied last, over the
    translated config, and checked against the engine's own config; options for another engine are ignored."""

    @property
    def is_offline(self) -> bool:
        """An offline stage (sft, dpo, reward_model): trains on fixed rows, no rollout and no reward."""
        return self.algorithm.name in OFFLINE_STAGES

    def _check_stage_knobs(self) -> None:
        """An RL knob must keep its default in an offline stage (one that would change nothing is an error)."""
        name = self.algorithm.name
        if self.is_offline:
            sections = {"rollout": RolloutConfig, "critic": CriticConfig}  # named field by field
            knobs = [
                sub
                for k in RL_ONLY
                for sub in ([f"{k}.{f}" for f in sections[k].model_fields] if k in sections else [k])
            ]
            for knob in knobs:
                value = (
                    getattr(self, knob)
                    if "." not in knob
                    else getattr(getattr(self, knob.split(".")[0]), knob.split(".")[1])
                )
                if _dumped(value) != _dumped(_default_of(RunConfig, knob)):
                    raise ValueError(
                        f"{knob}: algorithm.name {name} trains on fixed rows (no rollout, reward or groups), "
                        f"so {knob} would change nothing; remove it"
                    )
        # offline.* under the wrong stage is each backend's capability check (rlbridge.contract.backend.offline_only)

    @model_validator(mode="after")
    def _cross_checks(self) -> "RunConfig":
        algo, tr = self.algorithm, self.training
        self._check_stage_knobs()
        if self.is_offline:
            self._check_offline_batches()
            return self
        if algo.name in GROUP_ALGORITHMS and algo.group_size < 2:
            raise ValueError(
                f"algorithm.group_size is {algo.group_size}, but {algo.name} compares samples within a group: "
                "set algorithm.group_size to 2 or more"
            )
        samples = tr.batch_size * algo.group_size
        if tr.mini_batch_size is not None:
            if tr.mini_batch_size % algo.group_size:  # every engine splits updates at prompt boundaries
                raise ValueError(
                    f"training.mini_batch_size ({tr.mini_batch_size}) is not divisible by algorithm.group_size "
                    f"({algo.group_size}): use a multiple of {algo.group_size} so that a prompt's samples are not split"
                )
            if samples % tr.mini_batch_size:
                raise ValueError(
                    f"training.mini_batch_size ({tr.mini_batch_size}) does not divide the rollout batch "
                    f"(batch_size x group_size = {samples}): use a divisor of {samples}"
                )
        mini = tr.mini_batch_size or samples
        if tr.micro_batch_size is not None and mini % tr.micro_batch_size:
            raise ValueError(
                f"training.micro_batch_size ({tr.micro_batch_size}) does not divide the mini batch ({mini}): "
                f"use a divisor of {mini}"
            )
        if self.critic.micro_batch_size is not None and mini % self.critic.micro_batch_size:
            raise ValueError(
                f"critic.micro_batch_size ({self.critic.micro_batch_size}) does not divide the mini batch ({mini}): "
                f"use a divisor of {mini}"
            )
        if algo.dynamic_sampling and algo.name not in GROUP_ALGORITHMS:
            raise ValueError(
                f"algorithm.dynamic_sampling drops groups of samples of one prompt; {algo.name} has no groups: "
                "use grpo, dr_grpo or rloo, or remove it"
            )
        default = type(algo).model_fields["rollout_correction_threshold"].default  # (a dumped config must load)
        if algo.rollout_correction == "none" and algo.rollout_correction_threshold != default:
            raise ValueError(
                "algorithm.rollout_correction_threshold needs algorithm.rollout_correction (e.g. token_truncate)"
            )
        if self.rollout.drop_overlong_prompts and self.rollout.max_prompt_tokens is None:
            raise ValueError(
                "rollout.drop_overlong_prompts needs rollout.max_prompt_tokens (the length above which prompts are "
                "dropped)"
            )
        if self.model.chat_template_kwargs and not self.model.use_chat_template:
            raise ValueError(
                "model.chat_template_kwargs needs model.use_chat_template: true (without it no template is applied)"
            )
        if not self.reward and self.environment is None:
            raise ValueError("'reward' is empty: add at least one reward plugin (see `rlbridge plugins`)")
        if self.training.max_restarts and not self.checkpoint.interval:
            raise ValueError(
                f"training.max_restarts ({self.training.max_restarts}) restarts from the last complete checkpoint, and "
                "checkpoint.interval is 0 (none are saved): set checkpoint.interval (steps between checkpoints, "
                "e.g. 10) "
                "or training.max_restarts=0"
            )
        return self

    def _check_offline_batches(self) -> None:
        """Today's batch semantics with one sample per row (docs/batch-semantics.md): batch_size rows per
        step, mini_batch_size rows per optimizer update, micro_batch_size rows per forward/backward."""
        tr = self.training
        if tr.mini_batch_size is not None and tr.batch_size % tr.mini_batch_size:
            raise ValueError(
                f"training.mini_batch_size ({tr.mini_batch_size}) does not divide the batch of "
                f"training.batch_size = {tr.batch_size} rows: use a divisor of {tr.batch_size}"
            )
        mini = tr.mini_batch_size or tr.batch_size
        if tr.micro_batch_size is not None and mini % tr.micro_batch_size:
            raise ValueError(
                f"training.micro_batch_size ({tr.micro_batch_size}) does not divide the mini batch ({mini}): "
                f"use a divisor of {mini}"
            )

    # Derived batch arithmetic, shared by every adapter.
    @property
    def rollout_samples(self) -> int:
        """Samples per training step: generated (batch_size x group_size) in RL, rows (batch_size) in an
        offline stage (a DPO/RM row is one preference pair)."""
        if self.is_offline:
            return self.training.batch_size
        return self.training.batch_size * self.algorithm.group_size

    @property
    def mini_batch_samples(self) -> int:
        return self.training.mini_batch_size or self.rollout_samples

    @property
    def updates_per_step(self) -> int:
        """Optimizer updates per training step."""
        return (self.rollout_samples // self.mini_batch_samples) * self.algorithm.epochs_per_rollout


def check_devices(config: RunConfig, layout: dict[str, Any]) -> None:
    """The training layout validated together against the devices, the same for every engine (as
    torchtitan's parallelism block): run once gpus_per_node 'auto' is counted and the placement policy's
    `layout` (role -> devices) is known. Only the training processes count (`layout['actor']`): a
    rollout on devices of its own holds no rank of the training layout. The batch sizes are global
    (docs/batch-semantics.md), so the mini batch must split evenly over the data-parallel ranks."""
    from rlbridge.errors import ConfigError

    tr, res = config.training, config.resources
    gpus = 0 if res.gpus_per_node == "auto" else int(res.gpus_per_node)
    if gpus > 0 and res.cpu_ranks_per_node != 1:
        raise ConfigError(
            f"resources.cpu_ranks_per_node ({res.cpu_ranks_per_node}) is for CPU runs (gpus_per_node 0); with "
            f"{gpus} GPUs per node every GPU is a rank: remove it"
        )
    devices = max(int(layout.get("actor", 1)), 1)
    tp, pp, sp, ep = (
        tr.tensor_parallel_size,
        tr.pipeline_parallel_size,
        tr.sequence_parallel_size,
        tr.expert_parallel_size,
    )
    if devices % tr.model_parallel_size:
        raise ConfigError(
            f"training.tensor_parallel_size ({tp}) x pipeline_parallel_size ({pp}) x sequence_parallel_size ({sp}) = "
            f"{tr.model_parallel_size} devices per model copy does not divide the {devices} training devices; "
            "use sizes whose product divides them"
        )
    data_parallel = devices // tr.model_parallel_size
    if ep > 1 and (devices // pp) % ep:
        raise ConfigError(
            f"training.expert_parallel_size ({ep}) does not divide the {devices // pp} training devices of one "
            f"pipeline stage ({devices} / pipeline_parallel_size {pp}); use a divisor of {devices // pp}"
        )
    if tr.shard_group_size is not None and data_parallel % tr.shard_group_size:
        raise ConfigError(
            f"training.shard_group_size ({tr.shard_group_size}) does not divide the {data_parallel} data-parallel "
            f"ranks ({devices} training devices / {tr.model_parallel_size} per model copy); use a divisor of "
            f"{data_parallel}"
        )
    rollout_devices = int(layout.get("rollout", devices) or devices)
    replicas = config.rollout.data_parallel_size
    if replicas is not None and replicas * config.rollout.tensor_parallel_size > max(rollout_devices, 1):
        raise ConfigError(
            f"rollout.data_parallel_size ({replicas}) x rollout.tensor_parallel_size "
            f"({config.rollout.tensor_parallel_size}) needs {replicas * config.rollout.tensor_parallel_size} "
            f"devices, more than the rollout's {rollout_devices}; use fewer replicas or leave it unset"
        )
    mini = config.mini_batch_samples
    micro = tr.micro_batch_size
    ranks = f"{data_parallel} data-parallel rank" + ("s" if data_parallel != 1 else "")
    if data_parallel != devices:
        ranks += f" ({devices} training devices / {tr.model_parallel_size} per model copy)"
    else:
        ranks += f" ({devices} training device" + ("s)" if devices != 1 else ")")
    if micro is None:
        if mini % data_parallel:
            raise ConfigError(
                f"training.mini_batch_size: the mini batch ({mini} samples) does not split evenly over the {ranks}; "
                f"use a multiple of {data_parallel}, or set training.micro_batch_size"
            )
    elif mini % (micro * data_parallel):
        raise ConfigError(
            f"training.micro_batch_size ({micro}) x {ranks} does not divide the mini batch ({mini} samples); "
            f"use a micro batch that divides {mini // data_parallel if mini % data_parallel == 0 else mini}"
            + ("" if mini % data_parallel == 0 else f" and a mini batch that is a multiple of {data_parallel}")
        )
