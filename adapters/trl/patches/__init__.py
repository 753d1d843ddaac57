"""Version-gated patches the TRL adapter applies in its engine process (see rlbridge.engine.patches)."""

from rlbridge_adapters.trl.patches.accelerate_fsdp_cpu import ACCELERATE_FSDP_CPU
from rlbridge_adapters.trl.patches.async_grpo_cpu import ASYNC_GRPO_CPU_ATTENTION, ASYNC_GRPO_PEAK_FLOPS
from rlbridge_adapters.trl.patches.async_grpo_scoring import ASYNC_GRPO_CONCURRENT_SCORING
from rlbridge_adapters.trl.patches.vllm_cpu_linear import VLLM_CPU_LINEAR

PATCHES = [
    VLLM_CPU_LINEAR,
    ASYNC_GRPO_CPU_ATTENTION,
    ASYNC_GRPO_PEAK_FLOPS,
    ASYNC_GRPO_CONCURRENT_SCORING,
    ACCELERATE_FSDP_CPU,
]
