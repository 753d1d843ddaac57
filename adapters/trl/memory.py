"""What TRL does with memory for a plan (rlbridge.contract.memory.MemoryBehaviour), read in TRL 1.16.0,
transformers 5 and accelerate 1.16 as installed in rlbridge's TRL environment:

- One training process per device (GRPOTrainer or RLOOTrainer; `accelerate launch` for several), holding the
  policy, the reference model when algorithm.kl_coef > 0 (grpo_trainer.py: a second from_pretrained copy; none
  with LoRA, whose reference is the adapter switched off), and the rollout: HF generate on the process's share of
  the generation batch at once (`_generate_single_turn`: one `generate` call), or vLLM colocated in the same
  process (`vllm_mode: colocate`, external_launcher), or split off to `trl vllm-serve` on its own devices.
- Precision: the model in model.dtype (model_init_kwargs), trained in it: transformers' default optimizer is
  `adamw_torch_fused` from torch 2.8 (training_args.py), whose two moments take the parameters' dtype and whose
  fused step allocates no parameter-sized temporaries. DeepSpeed through accelerate keeps fp32 master weights
  and moments (12 bytes a parameter) beside bf16 parameters and gradients.
- Sharding from accelerate's config in the plan (`accelerate.*`: FSDP2 full shard or SHARD_GRAD_OP, DeepSpeed
  ZeRO stage, CPU offload). Under mixed precision accelerate's fsdp2_prepare_model upcasts the trainable
  parameters to fp32 (utils/fsdp_utils.py), so FSDP keeps fp32 shards, gradients and moments and gathers bf16.
  Several ranks without sharding are torch DDP (MULTI_CPU / MULTI_GPU), whose reducer keeps a flat copy of the
  gradients in its buckets (accelerate leaves gradient_as_bucket_view off).
- The loss: TRL 1.16's fused LM head (trainer/utils.py add_fused_lm_head, kernels/chunked_logprob.py) projects
  hidden states through the output layer in tiles of up to 4096 tokens x 32768 vocabulary, into one buffer of
  that full width whatever the vocabulary (`mm_buf`), and accumulates the output layer's gradient in fp32. Off
  Triton (CPU) it scores every position of the sequence, and its torch fallback holds two vocabulary-wide fp32
  temporaries beside the buffer in the forward (the scaled logits and their exponentials) and about six in the
  backward (log-probabilities, probabilities, the gradient and its products). With Triton (GPUs) only the
  completion's positions, folded in place.
- colocated vLLM with vllm_enable_sleep_mode: `llm.sleep(level=2)` after generation (vllm_generation.py): weights
  and KV cache freed; weights woken for the sync, the KV cache for generation.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Plan, resolved_dtype
from rlbridge.contract.config import RunConfig
from rlbridge.contract.memory import DTYPE_BYTES, GiB, Logits, MemoryBehaviour, env_bytes

PROCESS = "GRPOTrainer"
# Measured by benchmarks/memory_fit.py (docs/memory.md): the resident set of a TRL training process before its
# model loads (python, torch, transformers, trl, rlbridge); on a GPU the CUDA context and the allocator's slack.
RUNTIME_CPU = int(0.58 * GiB)
RUNTIME_GPU = int(1.0 * GiB)
# accelerate's launcher (torchrun) and rlbridge's engine process beside the ranks, when launched
LAUNCHER_CPU = int(0.45 * GiB)


def behaviour(config: RunConfig, plan: Plan) -> MemoryBehaviour:
    native = plan.native
    args = native.get("args", {})
    on_gpu = not args.get("use_cpu", False)
    s = DTYPE_BYTES[resolved_dtype(config)]
    accelerate = native.get("accelerate") or {}
    kind = accelerate.get("distributed_type", "")
    shards = (False, False, False)
    gathered = 0.0
    param, grad, optim = float(s), float(s), 2.0 * s
    offload_params = offload_optim = False
    if kind == "FSDP":
        fsdp = accelerate.get("fsdp_config", {})
        full = bool(fsdp.get("fsdp_reshard_after_forward", True))
        shards = (full, True, True)
        gathered = float(s)
        if accelerate.get("mixed_precision", "no") != "no":  # fsdp2_prepare_model upcasts trainable params to fp32
            param, grad, optim = 4.0, 4.0, 8.0
        offload_params = bool(fsdp.get("fsdp_offload_params"))
    elif kind == "DEEPSPEED":
        ds = accelerate.get("deepspeed_config", {})
        stage = int(ds.get("zero_stage", 2))
        shards = (stage >= 3, stage >= 2, stage >= 1)
        param, grad, optim = float(s), float(s), 12.0 if s == 2 else 2.0 * s
        gathered = float(s) if stage >= 3 else 0.0
        offload_params = ds.get("offload_param_device", "none") == "cpu"
        offload_optim = ds.get("offload_optimizer_device", "none") == "cpu"
    vllm = bool(args.get("use_vllm"))
    server = args.get("vllm_mode") == "server" or "server" in native or bool(native.get("async"))
    sleep = 2 if args.get("vllm_enable_sleep_mode") else 0
    env = native.get("env", {})
    reference = "trainer" if config.algorithm.kl_coef > 0 and config.model.lora is None else "none"
    tiles = {"chunk_tokens": 4096, "chunk_vocab": 32768, "head_grad_fp32": True, "tile_buffer": True}
    if on_gpu:  # Triton: the completion's positions, folded in place in the tile
        logits = Logits(scope="response", backward_copies=0, forward_copies=0, **tiles)
    else:  # the torch fallback: every position, and its temporaries beside the tile
        logits = Logits(scope="sequence", backward_copies=6, forward_copies=2, **tiles)
    launched = bool(accelerate)
    return MemoryBehaviour(
        engine="trl",
        training_process=PROCESS,
        param_bytes=param,
        grad_bytes=grad,
        optimizer_bytes=optim,
        compute_bytes=s,
        shards=shards,
        gathered_param_bytes=gathered,
        offload_parameters=offload_params,
        offload_optimizer=offload_optim,
        optimizer_steps_on_device=False,
        gradient_buckets=kind in ("MULTI_CPU", "MULTI_GPU"),
        reference=reference,
        reference_bytes=float(s),
        rollout="vllm" if vllm else "hf",
        rollout_process="own" if vllm and server else "trainer",
        rollout_sleep_level=sleep,
        rollout_weight_bytes=float(s) if not on_gpu else 2.0,
        kv_cache_bytes=None if on_gpu else env_bytes(env, "VLLM_CPU_KVCACHE_SPACE", 4),
        kv_bytes=s,
        logits=logits,
        runtime_bytes={PROCESS: RUNTIME_GPU if on_gpu else RUNTIME_CPU, "rollout": RUNTIME_GPU if on_gpu else GiB},
        other_processes={"accelerate launcher and rlbridge": LAUNCHER_CPU} if launched and not on_gpu else {},
        notes=_notes(args, vllm, sleep),
    )


def _notes(args: dict[str, Any], vllm: bool, sleep: int) -> tuple[str, ...]:
    if vllm and not sleep and args.get("vllm_mode", "colocate") == "colocate":
        return (
            "trl: colocated vLLM keeps its weights and KV cache through training (vllm_enable_sleep_mode false); "
            "backend_options.trl.vllm_enable_sleep_mode: true frees both outside generation",
        )
    return ()
