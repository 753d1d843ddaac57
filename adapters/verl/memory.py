"""What verl does with memory for a plan (rlbridge.contract.memory.MemoryBehaviour), read in verl 0.9.1 as
installed in rlbridge's verl environment (verl/workers/engine/fsdp/transformer_impl.py, the engine workers the
trainer uses, verl/trainer/config/engine/fsdp.yaml):

- One FSDP worker process per training device (Ray's `WorkerDict`, the fused actor, reference and rollout
  worker), holding the actor and the reference; vLLM runs in processes of its own (verl's async server:
  vLLMHttpServer and its EngineCore) on the rollout's devices.
- The actor: loaded in fsdp_config.model_dtype (fp32 by default: sharded fp32 master weights), computed under
  FSDP2's MixedPrecisionPolicy (param_dtype bf16, reduce_dtype fp32 by default): each FSDP unit gathered into
  bf16 copies while it computes, gradients reduced into sharded fp32, AdamW's moments in fp32 beside them (torch
  AdamW, foreach on GPUs: a parameter-sized fp32 temporary during the step).
- The reference: forward only, always under FSDP2's CPUOffloadPolicy (its parameters live in host memory; each
  unit comes to the device to compute), in model_dtype.
- fsdp_config.reshard_after_forward (FULL_SHARD or SHARD_GRAD_OP), fsdp_size (hybrid groups), param_offload and
  optimizer_offload (FSDPEngine.to: both leave the device between uses and come back for the update; the states
  return for the optimizer step).
- The loss: the model's logits for every position (padded, or every real token with use_remove_padding), in the
  compute dtype, scaled by the temperature and log-softmaxed in fp32; the rollout policy's log-probs also compute
  the entropy (ray_trainer.py: calculate_entropy=True), a softmax over the same logits.
- The colocated rollout (hybrid engine) with rollout.free_cache_engine / enable_sleep_mode: vLLM sleeps at level
  1 after generation (weights to host memory, KV cache freed) and wakes for the sync and the next generation.
  rlbridge's CPU plans turn both off (vLLM's CPU build has no sleep mode).
- Prompts are padded to data.max_prompt_length (rlbridge sets it to the longest prompt when it is unset), and
  responses to data.max_response_length.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Plan
from rlbridge.contract.config import RunConfig
from rlbridge.contract.memory import GiB, Logits, MemoryBehaviour, env_bytes

PROCESS = "WorkerDict"
A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
# Measured by benchmarks/memory_fit.py's runs (docs/memory.md): the resident set of verl's FSDP worker before its
# models load (python, torch, transformers, verl, Ray's worker: 0.85 GiB in the 10M run, which failed at its first
# weight sync), of vLLM's CPU worker beside its weights and KV cache, and of the run's other processes (their
# resident sets in the 60M run, less what they share). On a GPU, the CUDA context and the allocator's slack.
RUNTIME_CPU = int(0.85 * GiB)
VLLM_CPU = int(1.2 * GiB)
OTHERS_CPU = {
    "Ray (GCS, raylet, dashboard agent)": int(0.35 * GiB),
    "vLLM's HTTP server and engine core": int(1.0 * GiB),
    "TaskRunner, agent-loop, load-balancer and reward workers, rlbridge's engine process": int(2.5 * GiB),
}
RUNTIME_GPU = int(1.5 * GiB)
PRECISION = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


def _get(overrides: dict[str, Any], key: str, default: Any) -> Any:
    for spelled in (key, "+" + key, "++" + key):
        if spelled in overrides:
            return overrides[spelled]
    return default


def behaviour(config: RunConfig, plan: Plan) -> MemoryBehaviour | None:
    native = plan.native
    o = native.get("overrides", {})
    if native.get("entry_point") is not None:
        pass  # the async trainers keep the same workers; the rollout has devices of its own
    on_gpu = not native.get("cpu", False)
    master = PRECISION.get(str(_get(o, A + "fsdp_config.model_dtype", "fp32")), 4)
    compute = PRECISION.get(str(_get(o, A + "fsdp_config.mixed_precision.param_dtype", "bf16")), 2)
    reduce = PRECISION.get(str(_get(o, A + "fsdp_config.mixed_precision.reduce_dtype", "fp32")), 4)
    full_shard = bool(_get(o, A + "fsdp_config.reshard_after_forward", True))
    fsdp_size = int(_get(o, A + "fsdp_config.fsdp_size", -1))
    sharded = fsdp_size != 1
    shards = (sharded and full_shard, sharded, sharded)
    shared = bool(plan.layout.get("shared", True)) if plan.layout else True
    free_cache = bool(_get(o, R + "free_cache_engine", True))
    sleep_mode = bool(_get(o, R + "enable_sleep_mode", True))
    rollout = str(_get(o, R + "name", "vllm"))
    rollout_dtype = PRECISION.get(str(_get(o, R + "dtype", "bfloat16")), 2)
    prompt = _get(o, "data.max_prompt_length", None)
    bucket_mb = _get(o, R + "checkpoint_engine.update_weights_bucket_megabytes", 512)
    kl = config.algorithm.kl_coef > 0
    return MemoryBehaviour(
        engine="verl",
        training_process=PROCESS,
        param_bytes=float(master),
        grad_bytes=4.0,
        optimizer_bytes=8.0,
        compute_bytes=compute,
        shards=shards,
        gathered_param_bytes=float(compute),
        offload_parameters=bool(_get(o, A + "fsdp_config.param_offload", False)),
        offload_loads_whole=True,
        offload_optimizer=bool(_get(o, A + "fsdp_config.optimizer_offload", False)),
        optimizer_steps_on_device=True,
        optimizer_step_bytes=4.0 if on_gpu else 0.0,
        reference="trainer" if kl and config.model.lora is None else "none",
        reference_bytes=float(master),
        offload_reference=True,
        critic="trainer" if config.algorithm.name == "ppo" else "none",
        rollout="vllm" if rollout == "vllm" else "hf",
        rollout_process="own",
        rollout_sleep_level=1 if (free_cache and sleep_mode and shared) else 0,
        rollout_weight_bytes=float(rollout_dtype),
        kv_cache_bytes=None if on_gpu else env_bytes(native.get("env", {}), "VLLM_CPU_KVCACHE_SPACE", 4),
        kv_bytes=rollout_dtype,
        # in fp32 units: the compute-dtype logits, the per-row log-softmax outputs autograd keeps
        # (logprobs_from_logits_v2 off flash-attn) and their gradient; the rollout policy's pass adds the entropy's
        # softmax
        logits=Logits(scope="sequence", backward_copies=1.5 * compute / 2, forward_copies=2.0 * compute / 2),
        prompt_tokens=prompt if isinstance(prompt, int) else None,
        weight_sync_bytes=float(bucket_mb) * 2**20,  # a bucket of the weights on their way to vLLM
        # FSDP2 on more than one rank all-gathers each layer in param_dtype (torch/distributed/fsdp/_fully_shard/
        # _fsdp_collectives.py foreach_all_gather: all_gather_output; _fsdp_param_group.py:392 skips it on one rank)
        # and reduce-scatters its gradients from an unsharded copy in reduce_dtype (foreach_reduce:
        # reduce_scatter_input), fp32 in verl's MixedPrecisionPolicy (engine/fsdp/transformer_impl.py:394, 455);
        # on CPU glibc keeps about one of each a layer (docs/memory.md, "Where the model is weaker")
        collective_heap_bytes=0.0 if on_gpu else float(compute + reduce),
        runtime_bytes={PROCESS: RUNTIME_GPU if on_gpu else RUNTIME_CPU, "rollout": RUNTIME_GPU if on_gpu else VLLM_CPU},
        other_processes={} if on_gpu else dict(OTHERS_CPU),
    )
