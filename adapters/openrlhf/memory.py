"""What OpenRLHF does with memory for a plan (rlbridge.contract.memory.MemoryBehaviour), read in OpenRLHF 0.11.2
and DeepSpeed 0.19.6 as installed in rlbridge's OpenRLHF environment:

- Each role is a Ray actor of its own (cli/train_ppo_ray.py): PolicyModelActor per training device (the policy
  under DeepSpeed), ReferenceModelActor when algo.kl.init_coef > 0, CriticModelActor with a critic, and the vLLM
  engines (LLMRayActor); `--train.colocate_all` puts them on the same devices (one placement group).
- The policy: DeepSpeed ZeRO with bf16 parameters and gradients and fp32 master weights, gradients and Adam
  moments in the optimizer (utils/deepspeed/deepspeed_utils.py get_train_ds_config: "bf16" on; DeepSpeed's own
  estimate_zero2/3_model_states_mem_needs count 2 bytes of bf16 parameters plus 18 of the rest a parameter:
  16-bit gradients 2, fp32 gradients 4, fp32 master weights 4, Adam 8). ZeRO-3 keeps the bf16 parameters
  sharded and gathers a layer (and prefetches the next) to compute. --ds.adam_offload: DeepSpeed's CPU Adam,
  the fp32 states and gradients in host memory, the step on the CPU; ZeRO-3 offload_param (--ref.offload for
  the reference).
- --ds.enable_sleep with colocate_all: the DeepSpeed engines leave the device while vLLM generates;
  --vllm.enable_sleep: vLLM sleeps at level 1 outside generation.
- The loss: the logits of every position in bf16, upcast to an fp32 copy, divided by the temperature in place,
  then a chunked logsumexp (models/actor.py, models/utils.py log_probs_from_logits).
- rlbridge's CPU plans: ZeRO stage 0 (DeepSpeed's BF16_Optimizer: fp32 master weights and an fp32 gradient
  accumulator beside the bf16 ones), vLLM in float32 (its patches), no sleep.
"""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Plan
from rlbridge.contract.config import RunConfig
from rlbridge.contract.memory import GiB, Logits, MemoryBehaviour, env_bytes

PROCESS = "PolicyModelActor"
# Measured by benchmarks/memory_fit.py (docs/memory.md): the resident set of an OpenRLHF DeepSpeed actor before its
# model loads (python, torch, transformers, deepspeed, Ray's worker), of a vLLM CPU engine, and of the run's other
# processes (Ray's GCS and raylet, the driver). On a GPU, the CUDA context and the allocator's slack.
RUNTIME_CPU = int(0.9 * GiB)
VLLM_CPU = int(1.2 * GiB)
OTHERS_CPU = {"Ray (GCS, raylet)": int(0.35 * GiB), "driver and reward workers": int(1.0 * GiB)}
RUNTIME_GPU = int(1.5 * GiB)


def flags(args: list[Any]) -> dict[str, Any]:
    """OpenRLHF's argv as {flag: value} (a flag with no value: True)."""
    out: dict[str, Any] = {}
    key = None
    for item in args:
        if isinstance(item, str) and item.startswith("--"):
            key = item[2:]
            out[key] = True
        elif key is not None:
            out[key] = (
                item if out[key] is True else [*([out[key]] if not isinstance(out[key], list) else out[key]), item]
            )
    return out


def behaviour(config: RunConfig, plan: Plan) -> MemoryBehaviour:
    native = plan.native
    f = flags(native.get("args", []))
    on_gpu = not native.get("cpu", False)
    stage = int(f.get("ds.zero_stage", 2))
    adam_offload = bool(f.get("ds.adam_offload"))
    colocate_all = bool(f.get("train.colocate_all"))
    bf16 = f.get("ds.param_dtype", "bf16") in ("bf16", "fp16")
    param = 2.0 if bf16 else 4.0
    if stage == 0:  # BF16_Optimizer: an fp32 gradient accumulator beside the bf16 gradients, master weights, moments
        grad, optim = param + 4.0, 12.0
    elif stage == 3:  # DeepSpeed's own estimate: 18 bytes a parameter over the ranks, the bf16 parameters included
        grad, optim = 4.0, 12.0
    else:
        grad, optim = param + 4.0, 12.0
    kl = float(f.get("algo.kl.init_coef", 0.01)) > 0
    vllm = int(f.get("vllm.num_engines", 0) or 0) > 0
    return MemoryBehaviour(
        engine="openrlhf",
        training_process=PROCESS,
        param_bytes=param,
        grad_bytes=grad,
        optimizer_bytes=optim,
        compute_bytes=2 if bf16 else 4,
        shards=(stage >= 3, stage >= 2, stage >= 1),
        gathered_param_bytes=param if stage >= 3 else 0.0,
        offload_parameters=stage >= 3 and bool(f.get("ds.offload")),
        offload_optimizer=adam_offload,
        optimizer_steps_on_device=False,
        sleeps_during_generation=bool(f.get("ds.enable_sleep")) and colocate_all,
        reference="own" if kl else "none",
        reference_bytes=param,
        offload_reference=bool(f.get("ref.offload")),
        critic="own" if config.algorithm.name == "ppo" else "none",
        rollout="vllm" if vllm else "none",
        rollout_process="own",
        rollout_sleep_level=1 if f.get("vllm.enable_sleep") and colocate_all else 0,
        rollout_weight_bytes=2.0 if on_gpu else 4.0,
        kv_cache_bytes=None if on_gpu else env_bytes(native.get("env", {}), "VLLM_CPU_KVCACHE_SPACE", 4),
        kv_bytes=2 if on_gpu else 4,
        logits=Logits(scope="sequence", backward_copies=3.0, forward_copies=2.5),
        runtime_bytes={
            PROCESS: RUNTIME_GPU if on_gpu else RUNTIME_CPU,
            "reference": RUNTIME_GPU if on_gpu else RUNTIME_CPU,
            "critic": RUNTIME_GPU if on_gpu else RUNTIME_CPU,
            "rollout": RUNTIME_GPU if on_gpu else VLLM_CPU,
        },
        other_processes={} if on_gpu else dict(OTHERS_CPU),
    )
