"""Will it fit? Each device's peak memory for every role of a run, predicted before anything starts.

Pure arithmetic over three inputs, none of which loads a weight or imports torch:
- the model's shape (`ModelShape`): config.json (layers, hidden size, heads, vocabulary) and the parameter count
  from the safetensors headers (the first bytes of each file) or, without weights, from the shape;
- what the engine does with memory (`MemoryBehaviour`), declared by each adapter for a plan
  (adapters/<engine>/memory.py, `Backend.memory_behaviour`): precisions, what is sharded and offloaded, which
  process holds which role, the colocated rollout's sleep, how the loss's logits are computed;
- the run's config: batch and sequence sizes, the placement policy's layout, sharding and offload.

Each role's state is a `Component` with the phases of a step in which it is resident on a device (the actor's
gradients in the backward pass and the optimizer step, the rollout's KV cache while it generates, and in every
phase unless the engine puts it to sleep); a process's memory in a phase is the sum of its resident components,
and its peak the largest phase. docs/memory.md has every formula and the measured check against real runs
(benchmarks/memory_fit.py). A run's inputs, the pre-flight check and the table: rlbridge.contract.memory_check.

Why not call the libraries: accelerate's `estimate-memory` builds the model on the meta device (torch and
transformers in the user's process, and a hub download for a hub id) and counts weights and Adam only;
DeepSpeed's `estimate_zero2/3_model_states_mem_needs` need deepspeed importable (it is in OpenRLHF's environment,
not the user's) and cover model states only. The same arithmetic is here (ZeRO's 2 + 2 + 12 bytes a parameter
for bf16 with fp32 Adam, divided by the data-parallel ranks at each stage); tests/test_memory.py holds it to both
libraries' own numbers.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rlbridge.contract.config import RunConfig
from rlbridge.errors import ConfigError

GiB = 1024**3
MiB = 1024**2
PHASES = ("generate", "score", "log_probs", "backward", "critic_backward", "optimizer", "weight_sync")
"""The phases of one step, in order: the rollout generates; rewards score; forward-only passes compute the rollout
policy's and the reference's log-probs (and the critic's values); the actor's forward and backward over one micro
batch; the critic's (ppo only); the optimizer step; the weight sync to the rollout."""
PHASE_LABELS = {
    "generate": "generate",
    "score": "score",
    "log_probs": "log-probs",
    "backward": "backward",
    "critic_backward": "critic bwd",
    "optimizer": "optimizer",
    "weight_sync": "sync",
}
"""Each phase's column heading in the prediction's table (rlbridge.contract.memory_check.describe)."""
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


# --------------------------------------------------------------------------------------------- the model's shape
@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape, from its config.json."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    parameters: int
    """Every parameter (embeddings counted once when tied)."""
    parameters_from: str = "config"
    """Where `parameters` came from: 'safetensors headers' (exact) or 'config' (the shape's formula)."""
    attention_bias: bool = True

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_parameters(self) -> int:
        """One decoder layer's parameters (attention, MLP, two norms): the largest unit FSDP and ZeRO-3 gather."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        attention = h * self.heads * self.head_dim * 2 + h * kv * 2
        if self.attention_bias:
            attention += self.heads * self.head_dim + 2 * kv
        return attention + 3 * h * i + 2 * h

    @property
    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden

    @property
    def largest_gathered(self) -> int:
        """The largest block of parameters gathered at once under parameter sharding: a layer or the embedding."""
        return max(self.layer_parameters, self.embedding_parameters)

    def lora_parameters(self, rank: int, targets: str | list[str]) -> int:
        """Trainable parameters of LoRA adapters of `rank` on the linear layers `targets` names."""
        h, kv, i, q = self.hidden, self.kv_dim, self.intermediate, self.heads * self.head_dim
        shapes = {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }
        names = list(shapes) if targets == "all-linear" else [t for t in targets if t in shapes]
        return self.layers * sum(rank * (shapes[n][0] + shapes[n][1]) for n in names)


def shape_from_config(cfg: dict[str, Any], parameters: int | None = None, parameters_from: str = "") -> ModelShape:
    """A ModelShape from a config.json (Llama-style names: Qwen2/3, Llama, Mistral; GPT-2's n_embd/n_layer too)."""
    text = cfg.get("text_config") or cfg  # multimodal configs keep the language model's shape one level down
    try:
        hidden = int(text.get("hidden_size") or text["n_embd"])
        layers = int(text.get("num_hidden_layers") or text["n_layer"])
        heads = int(text.get("num_attention_heads") or text["n_head"])
        vocab = int(text["vocab_size"])
    except KeyError as exc:
        raise ConfigError(
            f"model.path: its config.json has no {exc.args[0]}; the memory model reads a decoder's hidden size, "
            "layers, heads and vocabulary from it (use --no-fit-check to train without the check)"
        ) from None
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    intermediate = int(text.get("intermediate_size") or text.get("n_inner") or 4 * hidden)
    tied = bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", True)))
    bias = bool(text.get("attention_bias", text.get("model_type", cfg.get("model_type")) in ("qwen2", "qwen2_moe")))
    shape = ModelShape(layers, hidden, intermediate, heads, kv_heads, head_dim, vocab, tied, 0, "config", bias)
    counted = shape.layers * shape.layer_parameters + shape.embedding_parameters * (1 if tied else 2) + hidden
    return replace(shape, parameters=parameters or counted, parameters_from=parameters_from or "config")


def safetensors_parameters(model_dir: Path) -> int | None:
    """The exact parameter count from the headers of a directory's *.safetensors files (8 bytes of length, then a
    JSON header of every tensor's shape), or None when it has none. Reads a few kilobytes, never the weights."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        for name, info in header.items():
            if name != "__metadata__":
                total += math.prod(info["shape"])
    return total


def read_shape(model_dir: str | Path) -> ModelShape:
    """The shape of the model in `model_dir` (its config.json), its parameters counted from the safetensors headers
    when there are weights, else from the shape."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(
            f"model.path: no config.json in {model_dir}; the memory model reads the model's shape from it "
            "(use --no-fit-check to train without the check)"
        )
    cfg = json.loads(path.read_text())
    exact = safetensors_parameters(Path(model_dir))
    return shape_from_config(cfg, exact, "safetensors headers" if exact else "config")


# ------------------------------------------------------------------------------------ what an engine declares
@dataclass(frozen=True)
class Logits:
    """How the engine computes the loss's per-token log-probs from the output layer: the usual surprise, since the
    logits are vocabulary x tokens, upcast to fp32."""

    scope: Literal["response", "sequence"] = "response"
    """Which positions get logits: the response's only, or every position of the sequence."""
    chunk_tokens: int | None = None
    """Tokens per tile when the engine computes them in tiles (TRL's fused LM head); None: the micro batch at once."""
    chunk_vocab: int | None = None
    """Vocabulary columns per tile (None: all of them)."""
    backward_copies: float = 3.0
    """Logits-sized fp32 tensors alive at once at the backward's peak (logits, their softmax, its gradient...)."""
    forward_copies: float = 2.0
    """The same in a forward-only pass (log-probs of the rollout policy and the reference)."""
    head_grad_fp32: bool = False
    """An fp32 accumulator of the output embedding's gradient in the backward (TRL's chunked log-prob)."""
    tile_buffer: bool = False
    """One chunk_tokens x chunk_vocab buffer in the compute dtype, whatever the vocabulary (TRL's `mm_buf`), beside
    the copies."""


@dataclass(frozen=True)
class MemoryBehaviour:
    """What an engine does with memory for one plan, declared by its adapter (adapters/<engine>/memory.py). Bytes
    "per parameter" multiply the policy's parameter count; the core divides them by the sharding."""

    engine: str
    training_process: str
    """The name of the process that trains the policy (in the table and in benchmarks/memory_fit.py, which finds
    it by this name in its command line or Ray title)."""
    param_bytes: float
    """The policy's resident parameters (fp32 master weights where the engine keeps them on the device)."""
    grad_bytes: float
    optimizer_bytes: float
    """Optimizer states (Adam's two moments, plus fp32 master weights where they live in the optimizer)."""
    compute_bytes: int
    """Bytes of an activation (the compute dtype)."""
    shards: tuple[bool, bool, bool] = (False, False, False)
    """What is partitioned over the data-parallel ranks: (parameters, gradients, optimizer states)."""
    gathered_param_bytes: float = 0.0
    """Bytes a parameter of a gathered (unsharded) layer takes while it computes (FSDP's bf16 copy); 0: none."""
    offload_parameters: bool = False
    offload_loads_whole: bool = False
    """With offload_parameters: True when the whole model comes back to the device to compute (verl's
    FSDPEngine.to); False when each layer is gathered from host memory as it computes (FSDP2's CPUOffloadPolicy,
    ZeRO-3 offload_param), the gradients going back as they are made."""
    offload_optimizer: bool = False
    optimizer_steps_on_device: bool = True
    """With offload_optimizer: True when the states are loaded back for the step (verl), False when the step runs
    on the CPU (DeepSpeed's CPU Adam)."""
    sleeps_during_generation: bool = False
    """The trainer's parameters, gradients and optimizer states leave the device while the rollout generates
    (verl's offload around generation, OpenRLHF --ds.enable_sleep)."""
    gradient_buckets: bool = False
    """With more than one data-parallel rank: DDP's reducer keeps a flat copy of the gradients in buckets, allocated
    once and kept (torch DDP with gradient_as_bucket_view false, accelerate's default)."""
    optimizer_step_bytes: float = 0.0
    """Transient bytes a parameter during the optimizer step (a foreach implementation's temporaries)."""
    reference: Literal["none", "trainer", "own"] = "none"
    """Where the reference model lives: none, in the training process, or in a process of its own."""
    reference_bytes: float = 0.0
    offload_reference: bool = False
    critic: Literal["none", "trainer", "own"] = "none"
    rollout: Literal["hf", "vllm", "none"] = "hf"
    rollout_process: Literal["trainer", "own"] = "trainer"
    rollout_sleep_level: int = 0
    """vLLM sleep when colocated: 0 never; 1 weights to CPU and KV cache freed outside generation; 2 both freed."""
    rollout_weight_bytes: float = 2.0
    kv_cache_bytes: int | None = None
    """A fixed KV cache (vLLM on CPU: VLLM_CPU_KVCACHE_SPACE); None: what gpu_memory_utilization leaves."""
    kv_bytes: int = 2
    generation_samples: int | None = None
    """Sequences one HF-generate rollout process generates at once; None: every sample of the step on that rank."""
    logits: Logits = field(default_factory=Logits)
    prompt_tokens: int | None = None
    """The prompt length the engine pads to (verl: data.max_prompt_length); None: measured from the data."""
    weight_sync_bytes: float = 0.0
    """Transient bytes of a weight sync beyond the two copies (a bucket, a gathered tensor)."""
    collective_heap_bytes: float = 0.0
    """CPU, parameters sharded over more than one rank: bytes per parameter of every decoder layer that the engine's
    collectives allocate at the unsharded layer's size and glibc's heap keeps, about one set a layer (FSDP2 on gloo:
    the all-gather output in param_dtype and the reduce-scatter input in reduce_dtype, for every layer in every
    forward and backward; on one rank torch skips the all-gather and gloo, and the term is not added). The
    heap_retention fraction does not cover them: they are the same size on any number of ranks while the rest of
    the transients shrink. Measured with benchmarks/fsdp2_heap_probe.py (docs/memory.md): 3.8-6.4 bytes a layer
    parameter kept for the 60M and 244M models on 2 ranks. On a GPU PyTorch's caching allocator reuses the
    blocks: 0."""
    runtime_bytes: dict[str, int] = field(default_factory=dict)
    """Each process's own memory before any model (its libraries, a CUDA context), by process name."""
    other_processes: dict[str, int] = field(default_factory=dict)
    """CPU runs: the engine's processes that hold no role (a Ray driver, workers) and their memory, by name."""
    notes: tuple[str, ...] = ()


# -------------------------------------------------------------------------------------------------- the prediction
@dataclass(frozen=True)
class Component:
    role: str
    what: str
    bytes: int
    phases: frozenset[str]
    formula: str = ""


@dataclass
class ProcessMemory:
    name: str
    roles: tuple[str, ...]
    components: list[Component]

    def in_phase(self, phase: str) -> int:
        return sum(c.bytes for c in self.components if phase in c.phases)

    def peak(self, phases: tuple[str, ...]) -> tuple[str, int]:
        best = max(phases, key=self.in_phase)
        return best, self.in_phase(best)


@dataclass
class DeviceMemory:
    label: str
    count: int
    """Devices alike (every training rank holds the same)."""
    processes: list[ProcessMemory]

    def in_phase(self, phase: str) -> int:
        return sum(p.in_phase(phase) for p in self.processes)

    def peak(self, phases: tuple[str, ...]) -> tuple[str, int]:
        best = max(phases, key=self.in_phase)
        return best, self.in_phase(best)

    def top_component(self, phase: str) -> Component:
        return max((c for p in self.processes for c in p.components if phase in c.phases), key=lambda c: c.bytes)


@dataclass
class Prediction:
    engine: str
    on_gpu: bool
    phases: tuple[str, ...]
    devices: list[DeviceMemory]
    shape: ModelShape
    sequence: tuple[int, int]
    """(prompt, response) tokens."""
    device_bytes: int | None
    """One device's memory (GPU) or the node's (CPU); None when unknown."""
    device_bytes_from: str = ""
    host: list[Component] = field(default_factory=list)
    """What offload keeps in the host's memory (per node)."""
    other: list[Component] = field(default_factory=list)
    """CPU: the engine's processes that hold no role."""
    notes: list[str] = field(default_factory=list)

    def process_peaks(self) -> dict[str, tuple[str, int]]:
        """Every process's predicted peak (phase, bytes), by name (one per name: ranks are alike)."""
        return {p.name: p.peak(self.phases) for d in self.devices for p in d.processes}

    def node_in_phase(self, phase: str) -> int:
        """CPU: the whole machine in a phase (every rank's processes, plus the engine's others)."""
        return sum(d.in_phase(phase) * d.count for d in self.devices) + sum(c.bytes for c in self.other)

    def worst(self) -> tuple[DeviceMemory | None, str, int]:
        """The binding (device, phase, bytes): on GPU the fullest device, on CPU the machine as a whole."""
        if not self.on_gpu:
            phase = max(self.phases, key=self.node_in_phase)
            return None, phase, self.node_in_phase(phase)
        device = max(self.devices, key=lambda d: d.peak(self.phases)[1])
        phase, peak = device.peak(self.phases)
        return device, phase, peak

    def fits(self) -> bool:
        return self.device_bytes is None or self.worst()[2] <= self.device_bytes


# ------------------------------------------------------------------------------------------- the arithmetic
def activation_bytes_per_token(shape: ModelShape, compute_bytes: int, checkpointing: bool) -> tuple[int, int]:
    """(bytes per token across all layers kept for the backward, bytes per token of one layer recomputed or
    working in the backward) for a Llama-style decoder in transformers (SDPA or flash attention).

    Counted from what autograd saves (tests/test_memory.py checks it with saved_tensors_hooks): per layer the two
    RMSNorms keep their fp32 input and normalized output, attention keeps the rotated query and key, the value,
    its output and a contiguous copy for o_proj, plus a log-sum-exp per head; the SwiGLU MLP keeps gate, SiLU, up
    and their product. With gradient checkpointing only each layer's input stays, and one layer is recomputed at
    a time in the backward."""
    s, h, kv, i = compute_bytes, shape.hidden, shape.kv_dim, shape.intermediate
    norm = (4 + s) * h  # the fp32 upcast of its input and the normalized output in the compute dtype
    layer = s * (4 * h + 2 * kv + 4 * i) + 2 * norm + 4 * shape.heads + 8
    outside = s * h + 4 * h + s * h + 12  # the embedding's output, the final norm's input and output
    if checkpointing:
        return shape.layers * s * h + outside, layer
    return shape.layers * layer + outside + 2 * shape.head_dim, layer  # and the rotary tables


def kv_bytes_per_token(shape: ModelShape, kv_bytes: int) -> int:
    return 2 * shape.layers * shape.kv_dim * kv_bytes


def _fmt(n: float) -> str:
    return format_bytes(n)


def format_bytes(n: float) -> str:
    if abs(n) >= GiB:
        return f"{n / GiB:.2f} GiB"
    if abs(n) >= 10 * MiB or n == 0:
        return f"{n / MiB:.0f} MiB"
    if abs(n) >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


@dataclass(frozen=True)
class Sizes:
    """The run's sizes the arithmetic needs, resolved from the config and the layout."""

    training_devices: int
    data_parallel: int
    shard_group: int
    model_parallel: int
    sequence_parallel: int
    micro_batch: int
    forward_micro_batch: int
    critic_micro_batch: int
    prompt: int
    response: int
    rollout_samples: int
    rollout_devices: int
    rollout_replicas: int
    shared: bool


def run_sizes(config: RunConfig, layout: dict[str, Any], prompt_tokens: int) -> Sizes:
    tr, ro = config.training, config.rollout
    devices = max(int(layout.get("actor", 1) or 1), 1)
    model_parallel = tr.tensor_parallel_size * tr.pipeline_parallel_size
    sp = tr.sequence_parallel_size
    dp = max(devices // (model_parallel * sp), 1)
    group = tr.shard_group_size or dp
    micro = tr.micro_batch_size or max(config.mini_batch_samples // dp, 1)
    if config.is_offline:
        prompt_tokens, response = config.offline.max_length, 0
    else:
        response = ro.max_new_tokens
    rollout_devices = max(int(layout.get("rollout", devices) or devices), 1)
    replicas = ro.data_parallel_size or max(rollout_devices // ro.tensor_parallel_size, 1)
    return Sizes(
        training_devices=devices,
        data_parallel=dp,
        shard_group=group,
        model_parallel=model_parallel,
        sequence_parallel=sp,
        micro_batch=micro,
        forward_micro_batch=tr.forward_micro_batch_size or micro,
        critic_micro_batch=config.critic.micro_batch_size or micro,
        prompt=prompt_tokens,
        response=response,
        rollout_samples=0 if config.is_offline else config.rollout_samples,
        rollout_devices=rollout_devices,
        rollout_replicas=replicas,
        shared=bool(layout.get("shared", True)),
    )


def _tokens(sizes: Sizes, micro: int, config: RunConfig) -> int:
    """Tokens of one micro batch on one device (padded to prompt + response; sequence parallelism splits them)."""
    cap = config.training.max_tokens_per_device
    tokens = cap if cap else micro * (sizes.prompt + sizes.response)
    return math.ceil(tokens / sizes.sequence_parallel)


def _logit_tokens(sizes: Sizes, micro: int, behaviour: MemoryBehaviour, config: RunConfig) -> int:
    scope = sizes.response if behaviour.logits.scope == "response" else sizes.prompt + sizes.response - 1
    tokens = micro * scope if not config.training.max_tokens_per_device else config.training.max_tokens_per_device
    tokens = math.ceil(tokens / sizes.sequence_parallel)
    return min(tokens, behaviour.logits.chunk_tokens) if behaviour.logits.chunk_tokens else tokens


def predict(
    config: RunConfig,
    shape: ModelShape,
    behaviour: MemoryBehaviour,
    layout: dict[str, Any],
    prompt_tokens: int,
    device_bytes: int | None,
    device_bytes_from: str = "",
    critic_shape: ModelShape | None = None,
    gpus: int = 0,
) -> Prediction:
    """Every device's memory in every phase of a step of `config` on the engine `behaviour` describes."""
    b = behaviour
    prompt = b.prompt_tokens or prompt_tokens
    sizes = run_sizes(config, layout, prompt)
    on_gpu = gpus > 0
    all_phases = frozenset(PHASES)
    P = shape.parameters
    lora = config.model.lora
    trainable = shape.lora_parameters(lora.rank, lora.target_modules) if lora else P
    mp = sizes.model_parallel
    shard = sizes.shard_group
    s_params, s_grads, s_optim = b.shards
    notes: list[str] = list(b.notes)
    host: list[Component] = []

    def per_device(n: float, sharded: bool) -> int:
        return int(n / mp / (shard if sharded else 1))

    def phases_but(*excluded: str) -> frozenset[str]:
        return all_phases - set(excluded)

    training_phases = frozenset({"log_probs", "backward", "critic_backward", "optimizer", "weight_sync"})
    resting = phases_but("generate", "score") if b.sleeps_during_generation and sizes.shared else all_phases

    def trainer_state(role: str, params: int, trainable_params: int, micro: int, backward_phase: str):
        """The components of a trained model (the actor or the critic) on one training device."""
        out: list[Component] = []
        sharding = f" / {shard} ranks" if s_params and shard > 1 else ""
        mp_note = f" / {mp} model-parallel" if mp > 1 else ""
        frozen = params - trainable_params
        param_total = trainable_params * b.param_bytes + frozen * (b.reference_bytes or b.param_bytes)
        param_device = per_device(param_total, s_params)
        param_formula = f"{params:,} x {b.param_bytes:g} B{sharding}{mp_note}"
        offloaded = b.offload_parameters and on_gpu
        if offloaded:
            host.append(Component(role, "parameters (offloaded)", param_device, all_phases, param_formula))
        if offloaded and b.offload_loads_whole:  # back on the device, whole, for the training phases
            out.append(Component(role, "parameters (loaded to compute)", param_device, training_phases, param_formula))
        elif not offloaded:
            out.append(Component(role, "parameters", param_device, resting, param_formula))
        if (s_params or offloaded) and b.gathered_param_bytes:
            gathered = int(2 * shape.largest_gathered * b.gathered_param_bytes / mp)  # this layer and the prefetched
            out.append(
                Component(
                    role,
                    "gathered layers",
                    gathered,
                    training_phases,
                    f"2 x {shape.largest_gathered:,} x {b.gathered_param_bytes:g} B (a layer and the next)",
                )
            )
        grads = per_device(trainable_params * b.grad_bytes, s_grads)
        grad_phases = frozenset({backward_phase, "optimizer"})
        grad_formula = f"{trainable_params:,} x {b.grad_bytes:g} B" + (
            f" / {shard} ranks" if s_grads and shard > 1 else ""
        )
        # gradients follow the parameters to host memory (FSDP2's CPUOffloadPolicy, ZeRO-3 offload_param) or the
        # optimizer states where the step runs on the CPU (DeepSpeed's CPU Adam)
        grads_on_host = on_gpu and (
            (offloaded and not b.offload_loads_whole) or (b.offload_optimizer and not b.optimizer_steps_on_device)
        )
        if grads_on_host:
            host.append(Component(role, "gradients (offloaded)", grads, grad_phases, grad_formula))
            out.append(
                Component(
                    role,
                    "gradients of a layer (on their way out)",
                    int(2 * shape.largest_gathered * b.grad_bytes / mp),
                    frozenset({backward_phase}),
                    f"2 x {shape.largest_gathered:,} x {b.grad_bytes:g} B",
                )
            )
        else:
            out.append(Component(role, "gradients", grads, grad_phases, grad_formula))
        if b.gradient_buckets and sizes.data_parallel > 1:
            out.append(
                Component(
                    role,
                    "DDP gradient buckets",
                    per_device(trainable_params * b.grad_bytes, False),
                    all_phases,
                    f"{trainable_params:,} x {b.grad_bytes:g} B",
                )
            )
        optim = per_device(trainable_params * b.optimizer_bytes, s_optim)
        optim_formula = f"{trainable_params:,} x {b.optimizer_bytes:g} B" + (
            f" / {shard} ranks" if s_optim and shard > 1 else ""
        )
        if b.offload_optimizer and on_gpu:
            host.append(Component(role, "optimizer states (offloaded)", optim, all_phases, optim_formula))
            if b.optimizer_steps_on_device:
                out.append(
                    Component(
                        role, "optimizer states (loaded for the step)", optim, frozenset({"optimizer"}), optim_formula
                    )
                )
        else:
            out.append(Component(role, "optimizer states", optim, resting, optim_formula))
        if b.optimizer_step_bytes and not (b.offload_optimizer and on_gpu and not b.optimizer_steps_on_device):
            out.append(
                Component(
                    role,
                    "optimizer step temporaries",
                    per_device(trainable_params * b.optimizer_step_bytes, s_optim),
                    frozenset({"optimizer"}),
                    f"{trainable_params:,} x {b.optimizer_step_bytes:g} B"
                    + (f" / {shard} ranks" if s_optim and shard > 1 else ""),
                )
            )
        tokens = _tokens(sizes, micro, config)
        kept, one_layer = activation_bytes_per_token(shape, b.compute_bytes, config.training.gradient_checkpointing)
        checkpoint_note = "with" if config.training.gradient_checkpointing else "without"
        out.append(
            Component(
                role,
                f"activations ({checkpoint_note} checkpointing)",
                int(tokens * (kept + one_layer) / max(config.training.tensor_parallel_size, 1)),
                frozenset({backward_phase}),
                f"{tokens:,} tokens x ({_fmt(kept)} kept + {_fmt(one_layer)} one layer) a token",
            )
        )
        return out

    def logits_component(role: str, micro: int, phase: str, copies: float) -> Component:
        tokens = _logit_tokens(sizes, micro, b, config)
        vocab = min(shape.vocab, b.logits.chunk_vocab) if b.logits.chunk_vocab else shape.vocab
        size = int(tokens * vocab * 4 * copies)
        formula = f"{tokens:,} tokens x {vocab:,} vocab x 4 B x {copies:g}"
        if b.logits.tile_buffer and b.logits.chunk_vocab:
            size += tokens * b.logits.chunk_vocab * b.compute_bytes
            formula += f" + a {tokens:,} x {b.logits.chunk_vocab:,} x {b.compute_bytes} B tile buffer"
        if b.logits.head_grad_fp32 and phase != "log_probs":
            size += shape.embedding_parameters * 4
            formula += f" + {shape.embedding_parameters:,} x 4 B (output-layer gradient in fp32)"
        return Component(role, "loss logits (fp32)", size, frozenset({phase}), formula)

    # ---- the training device's processes
    trainer = ProcessMemory(b.training_process, ("actor",), [])
    trainer.components.append(
        Component("runtime", "process", b.runtime_bytes.get(b.training_process, 0), all_phases, "declared")
    )
    trainer.components += trainer_state("actor", P, trainable, sizes.micro_batch, "backward")
    if not config.is_offline or config.algorithm.name != "sft":
        trainer.components.append(logits_component("actor", sizes.micro_batch, "backward", b.logits.backward_copies))
    fwd_tokens = _tokens(sizes, sizes.forward_micro_batch, config)
    _, one_layer = activation_bytes_per_token(shape, b.compute_bytes, False)
    forward_pass = Component(
        "actor",
        "forward pass (no grad)",
        fwd_tokens * one_layer,
        frozenset({"log_probs"}),
        f"{fwd_tokens:,} tokens x {_fmt(one_layer)} (one layer at a time)",
    )
    trainer.components += [
        forward_pass,
        logits_component("actor", sizes.forward_micro_batch, "log_probs", b.logits.forward_copies),
    ]
    processes = [trainer]

    if b.reference != "none":
        ref_bytes = per_device(P * b.reference_bytes, s_params)
        ref_formula = f"{P:,} x {b.reference_bytes:g} B" + (f" / {shard} ranks" if s_params and shard > 1 else "")
        if b.offload_reference and on_gpu:  # in host memory; each layer comes to the device as it computes
            host.append(Component("reference", "parameters (offloaded)", ref_bytes, all_phases, ref_formula))
            ref = [
                Component(
                    "reference",
                    "gathered layers",
                    int(2 * shape.largest_gathered * b.compute_bytes / mp),
                    frozenset({"log_probs"}),
                    f"2 x {shape.largest_gathered:,} x {b.compute_bytes} B (a layer and the next)",
                )
            ]
        else:
            ref = [Component("reference", "parameters", ref_bytes, resting, ref_formula)]
        if b.reference == "trainer":
            trainer.roles += ("reference",)
            trainer.components += ref
        else:
            own = ProcessMemory("reference", ("reference",), [])
            own.components.append(Component("runtime", "process", b.runtime_bytes.get("reference", 0), all_phases))
            own.components += ref + [
                replace(forward_pass, role="reference"),
                replace(
                    logits_component("reference", sizes.forward_micro_batch, "log_probs", b.logits.forward_copies),
                    role="reference",
                ),
            ]
            processes.append(own)

    if b.critic != "none":
        cshape = critic_shape or shape
        critic = trainer_state(
            "critic", cshape.parameters, cshape.parameters, sizes.critic_micro_batch, "critic_backward"
        )
        if b.critic == "trainer":
            trainer.roles += ("critic",)
            trainer.components += critic
        else:
            own = ProcessMemory("critic", ("critic",), [])
            own.components.append(Component("runtime", "process", b.runtime_bytes.get("critic", 0), all_phases))
            own.components += critic
            processes.append(own)

    # ---- the rollout
    rollout_components: list[Component] = []
    kv_token = kv_bytes_per_token(shape, b.kv_bytes)
    seq = sizes.prompt + sizes.response
    if config.is_offline or b.rollout == "none":
        pass
    elif b.rollout == "hf":
        samples = b.generation_samples or math.ceil(sizes.rollout_samples / sizes.data_parallel)
        if s_params and shard > 1:  # generate needs the whole model: the shards are gathered for it
            rollout_components.append(
                Component(
                    "rollout",
                    "parameters gathered to generate",
                    int(P * (b.gathered_param_bytes or b.param_bytes) / mp),
                    frozenset({"generate"}),
                    f"{P:,} x {b.gathered_param_bytes or b.param_bytes:g} B",
                )
            )
        kv = samples * seq * kv_token
        step_logits = samples * shape.vocab * 4 * 2
        rollout_components += [
            Component(
                "rollout",
                "KV cache (HF generate)",
                kv + kv // shape.layers,
                frozenset({"generate"}),
                f"{samples} sequences x {seq} tokens x {_fmt(kv_token)} a token (+ one layer's copy as it grows)",
            ),
            Component(
                "rollout",
                "prefill and sampling",
                samples * sizes.prompt * one_layer + step_logits,
                frozenset({"generate"}),
                f"{samples * sizes.prompt:,} prompt tokens x {_fmt(one_layer)} + {samples} x {shape.vocab:,} x 8 B",
            ),
        ]
    else:  # vLLM
        tp = config.rollout.tensor_parallel_size
        weights = int(P * b.rollout_weight_bytes / tp)
        in_flight = math.ceil(sizes.rollout_samples / sizes.rollout_replicas) * seq
        needed = in_flight * kv_token // tp
        awake = all_phases if b.rollout_sleep_level == 0 or not sizes.shared else frozenset({"generate"})
        weight_phases = awake | frozenset({"weight_sync"}) if b.rollout_sleep_level < 2 or not sizes.shared else awake
        if on_gpu and device_bytes:
            budget = int(config.rollout.gpu_memory_utilization * device_bytes)
            activation = _vllm_activation_bytes(shape, b)
            kv = budget - weights - activation
            rollout_components += [
                Component(
                    "rollout",
                    "weights",
                    weights,
                    weight_phases,
                    f"{P:,} x {b.rollout_weight_bytes:g} B" + (f" / tp {tp}" if tp > 1 else ""),
                ),
                Component("rollout", "activations (profiled)", activation, awake, "vLLM's profiling run, estimated"),
                Component(
                    "rollout",
                    "KV cache",
                    max(kv, 0),
                    awake,
                    f"gpu_memory_utilization {config.rollout.gpu_memory_utilization:g} x {_fmt(device_bytes)} - "
                    "weights - activations",
                ),
            ]
            if kv <= 0:
                notes.append(
                    f"rollout: gpu_memory_utilization {config.rollout.gpu_memory_utilization:g} x {_fmt(device_bytes)} "
                    f"= {_fmt(budget)} does not hold the weights ({_fmt(weights)}) and activations: vLLM will not start"
                )
            elif needed > kv:
                notes.append(
                    f"rollout: the {in_flight:,} tokens in flight need {_fmt(needed)} of KV cache, the budget holds "
                    f"{_fmt(kv)} ({kv // max(kv_token // tp, 1):,} tokens): vLLM queues or preempts the rest (slower, "
                    "not out of memory)"
                )
            else:
                notes.append(
                    f"rollout: the {in_flight:,} tokens in flight use {needed / kv:.0%} of the KV cache "
                    f"({_fmt(needed)} of {_fmt(kv)}); the rest is reserved all the same"
                )
        else:
            kv = b.kv_cache_bytes if b.kv_cache_bytes is not None else needed
            rollout_components += [
                Component("rollout", "weights", weights, weight_phases, f"{P:,} x {b.rollout_weight_bytes:g} B"),
                Component(
                    "rollout",
                    "KV cache",
                    kv,
                    awake,
                    "VLLM_CPU_KVCACHE_SPACE" if b.kv_cache_bytes is not None else f"{in_flight:,} tokens in flight",
                ),
            ]
            if b.kv_cache_bytes is not None and needed > kv:
                notes.append(
                    f"rollout: the {in_flight:,} tokens in flight need {_fmt(needed)} of KV cache, more than its "
                    f"{_fmt(kv)}: vLLM queues or preempts the rest"
                )
        if b.rollout_sleep_level == 1 and sizes.shared and on_gpu:
            host.append(Component("rollout", "weights (asleep)", weights, all_phases - awake))
        if b.weight_sync_bytes:
            trainer.components.append(
                Component("rollout", "weight sync buffer", int(b.weight_sync_bytes), frozenset({"weight_sync"}))
            )
    if rollout_components:
        if b.rollout_process == "trainer":
            trainer.roles += ("rollout",)
            trainer.components += rollout_components
        else:
            own = ProcessMemory("rollout", ("rollout",), [])
            own.components.append(Component("runtime", "process", b.runtime_bytes.get("rollout", 0), all_phases))
            own.components += rollout_components
            processes.append(own)

    phases = tuple(p for p in PHASES if p != "critic_backward" or b.critic != "none")
    if config.is_offline:
        phases = tuple(p for p in phases if p in ("log_probs", "backward", "optimizer"))
    if not on_gpu:
        for process in processes:
            retained = heap_retention(process, phases)
            if retained:
                process.components.append(retained)
        if b.collective_heap_bytes and s_params and shard > 1:
            stranded = shape.layers * shape.layer_parameters * b.collective_heap_bytes / mp
            trainer.components.append(
                Component(
                    "runtime",
                    "allocator (collective buffers kept in the heap)",
                    int(stranded),
                    frozenset(PHASES),
                    f"{shape.layers} layers x {shape.layer_parameters:,} x {b.collective_heap_bytes:g} B (sharded "
                    f"over {shard} ranks)",
                )
            )
    train_label = "training device" + ("s" if sizes.training_devices > 1 else "")
    if sizes.shared or b.rollout_process == "trainer":
        devices = [DeviceMemory(train_label if on_gpu else "CPU rank", sizes.training_devices, processes)]
    else:
        training = [p for p in processes if p.name != "rollout"]
        rollout = [p for p in processes if p.name == "rollout"]
        devices = [DeviceMemory(train_label if on_gpu else "CPU rank", sizes.training_devices, training)]
        if rollout:
            devices.append(DeviceMemory("rollout device" if on_gpu else "CPU rollout", 1, rollout))
            devices[-1].count = max(sizes.rollout_replicas, 1) if not on_gpu else sizes.rollout_devices
    other = [] if on_gpu else [Component("engine", name, n, all_phases) for name, n in b.other_processes.items()]
    return Prediction(
        engine=b.engine,
        on_gpu=on_gpu,
        phases=phases,
        devices=devices,
        shape=shape,
        sequence=(sizes.prompt, sizes.response),
        device_bytes=device_bytes,
        device_bytes_from=device_bytes_from,
        host=host,
        other=other,
        notes=notes,
    )


CPU_HEAP_RETENTION = 0.3
"""glibc's malloc on CPU: the fraction of the peak phase's transient bytes (what is not resident in every phase:
activations, logits, gradients, the KV cache of HF generate) that stays resident as heap fragmentation. Freed
blocks below malloc's mmap threshold (up to 32 MiB, raised as large blocks are freed) go back to the heap, which
never returns memory that is not at its top, and the next phase's allocations fit its holes only in part.
Measured: a TRL-like step of the 60M model (benchmarks/memory_fit.py's) peaks at 2.89 GiB under glibc's defaults
and at 2.56 GiB with MALLOC_MMAP_THRESHOLD_=131072 (every block above 128 KiB returned at once): 0.33 GiB, 0.28 of
that peak's 1.19 GiB of transients (10M: 0.18 GiB, 0.34). docs/memory.md."""


def heap_retention(process: ProcessMemory, phases: tuple[str, ...]) -> Component | None:
    """The heap fragmentation a CPU process keeps (CPU_HEAP_RETENTION of its peak phase's transient bytes),
    resident from then on."""
    phase, _ = process.peak(phases)
    transient = sum(c.bytes for c in process.components if phase in c.phases and not set(phases) <= c.phases)
    if not transient:
        return None
    return Component(
        "runtime",
        "allocator (glibc heap fragmentation)",
        int(CPU_HEAP_RETENTION * transient),
        frozenset(PHASES),
        f"{CPU_HEAP_RETENTION:g} x {format_bytes(transient)} transient in {PHASE_LABELS.get(phase, phase)}",
    )


def _vllm_activation_bytes(shape: ModelShape, behaviour: MemoryBehaviour) -> int:
    """vLLM's profiled activation peak: a forward over max_num_batched_tokens (8192 by default in V1) tokens, one
    layer's intermediates and the sampler's logits for up to 256 sequences (an estimate; vLLM logs the real one)."""
    tokens = 8192
    return tokens * (shape.hidden * 4 + shape.intermediate * 2) * behaviour.kv_bytes + 256 * shape.vocab * 4 * 2


def env_bytes(env: dict[str, Any], name: str, default_gib: float) -> int:
    """A GiB count from an engine's environment variable in a plan (VLLM_CPU_KVCACHE_SPACE)."""
    try:
        return int(float(env.get(name, os.environ.get(name, default_gib))) * GiB)
    except (TypeError, ValueError):
        return int(default_gib * GiB)
