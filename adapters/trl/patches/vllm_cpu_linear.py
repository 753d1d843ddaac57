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

from rlbridge.patches import Patch, PatchKind, installed_version

_MODULES = ("vllm.model_executor.layers.utils", "vllm.model_executor.layers.linear")


def _needed() -> bool:
    # Only CPU builds of vLLM prepack; they ship as the vllm-cpu distribution.
    return installed_version("vllm-cpu") is not None


def _apply() -> None:
    import importlib

    import torch

    utils = importlib.import_module(_MODULES[0])
    original = utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "_rlbridge_patched", False):
        return

    def dispatch_unpacked(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.ndim == 2:
            layer.cpu_linear = torch.nn.functional.linear
            return
        original(layer, remove_weight)

    dispatch_unpacked._rlbridge_patched = True
    for name in _MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "dispatch_cpu_unquantized_gemm"):
            module.dispatch_cpu_unquantized_gemm = dispatch_unpacked


VLLM_CPU_LINEAR = Patch(
    name="trl-vllm-cpu-unpacked-linear",
    engine="vllm-cpu",
    versions=">=0.20",
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="AttributeError: 'Parameter' object has no attribute 'weight_loader' at vllm/model_executor/layers/linear.py "
    "on TRL's first colocated weight sync; with remove_weight=False only, stale packed weights",
    why="vLLM-CPU prepacks linear weights and drops layer.weight; TRL reloads weights without re-packing. "
    "Plain F.linear on layer.weight keeps every sync visible.",
    probe=_needed,
    apply=_apply,
    when=lambda native: bool(native.get("args", {}).get("use_vllm")) and bool(native.get("args", {}).get("use_cpu")),
)
