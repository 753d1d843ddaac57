"""TRL's asynchronous GRPO trainer on CPU: its tree attention and its peak-FLOPs probe assume CUDA.

1. It trains through FlashAttention-3, fetched from the Hub, which has no CPU build.

`AsyncGRPOTrainer` loads the policy with `attn_implementation="tree_fa3"`
(trl/experimental/async_grpo/packing.py `tree_attention`): the samples of a micro-batch are packed into a
prefix trie and each trie segment attends, causally, to the keys and values of its root-to-segment path
through `flash_attn_varlen_func` of `kernels.get_kernel("kernels-community/flash-attn3")` (`_flash_attn`).
That kernel is CUDA-only and downloaded at first use, so on CPU (and offline) the first forward fails.
The patch gives `_flash_attn` a PyTorch equivalent of the one call TRL makes: per segment, scaled
dot-product attention with FlashAttention's bottom-right causal mask (a query of segment i at position j
sees the path's keys up to its own position). Sliding windows and softcapping, which the tiny CPU models do
not use, are refused rather than ignored. CPU enablement, not an upstream bug.

2. `AsyncGRPOTrainer.__init__` calls `trl.trainer.utils.get_peak_flops_per_device`, which calls
`torch.cuda.get_device_name` whatever the device: `AssertionError: Torch not compiled with CUDA enabled`
(trl/trainer/utils.py, from async_grpo_trainer.py:1240). Off CUDA the patched name answers None, which the
trainer already reads as "peak unknown" (no MFU metrics, every other metric kept). An upstream bug: the
function is documented to return None for an unsupported device.
"""

from __future__ import annotations

from rlbridge.engine.patches import Patch, PatchKind, Target
from rlbridge.engine.kit import wrap_once


class TorchVarlenAttention:
    """The `flash_attn_varlen_func` subset tree_attention calls, in PyTorch (CPU or any device)."""

    @staticmethod
    def flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale=None,
        causal=True,
        window_size=(-1, -1),
        softcap=None,
        **unused,
    ):
        import torch
        import torch.nn.functional as F

        if tuple(window_size) != (-1, -1) or softcap:
            raise NotImplementedError(
                "rlbridge's CPU tree attention has no sliding window or softcapping "
                f"(window_size={window_size}, softcap={softcap})"
            )
        starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        outputs = []
        for i in range(len(starts_q) - 1):
            query = q[starts_q[i] : starts_q[i + 1]].transpose(0, 1)  # (heads, Lq, dim)
            key = k[starts_k[i] : starts_k[i + 1]].transpose(0, 1)
            value = v[starts_k[i] : starts_k[i + 1]].transpose(0, 1)
            lq, lk = query.shape[1], key.shape[1]
            # FlashAttention aligns the causal mask bottom-right: the segment's queries are the path's last lq keys
            mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(diagonal=lk - lq) if causal else None
            out = F.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, scale=softmax_scale, enable_gqa=query.shape[0] != key.shape[0]
            )
            outputs.append(out.transpose(0, 1))
        return torch.cat(outputs, 0)


def _off_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


def use_torch_tree_attention() -> None:
    import importlib

    packing = importlib.import_module("trl.experimental.async_grpo.packing")
    packing._flash_attn = lambda: TorchVarlenAttention


ASYNC_GRPO_CPU_ATTENTION = Patch(
    name="trl-async-grpo-cpu-tree-attention",
    engine="trl",
    versions=">=1.16,<1.17",  # read in trl 1.16.0's packing.py
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="AsyncGRPOTrainer's first forward: kernels.get_kernel('kernels-community/flash-attn3') at "
    "trl/experimental/async_grpo/packing.py _flash_attn (a CUDA kernel from the Hub; none on CPU, none offline)",
    why="the same varlen causal attention over the packed trie's paths, in PyTorch's scaled_dot_product_attention",
    probe=_off_cuda,
    apply=use_torch_tree_attention,
    when=lambda native: native.get("trainer") == "AsyncGRPOTrainer" and bool(native.get("args", {}).get("use_cpu")),
    targets=(
        Target("trl.experimental.async_grpo.packing", "_flash_attn", ("07862b769d34",)),
        Target("trl.experimental.async_grpo.packing", "tree_attention", ("331acdcef896",)),
    ),
)


def peak_flops_none_off_cuda() -> None:
    import importlib

    trainer = importlib.import_module("trl.experimental.async_grpo.async_grpo_trainer")

    def make(original):
        def peak_flops(accelerator, dtype):
            return None if accelerator.device.type != "cuda" else original(accelerator, dtype)

        return peak_flops

    wrap_once(trainer, "get_peak_flops_per_device", make)


ASYNC_GRPO_PEAK_FLOPS = Patch(
    name="trl-async-grpo-peak-flops-off-cuda",
    engine="trl",
    versions=">=1.16,<1.17",
    kind=PatchKind.UPSTREAM_BUG,
    fixes="AssertionError: Torch not compiled with CUDA enabled at trl/trainer/utils.py get_peak_flops_per_device "
    "(torch.cuda.get_device_name), from AsyncGRPOTrainer.__init__ (async_grpo_trainer.py:1240)",
    why="the function's documented answer for an unsupported device is None (MFU off); off CUDA it now gives it",
    probe=_off_cuda,
    apply=peak_flops_none_off_cuda,
    when=lambda native: native.get("trainer") == "AsyncGRPOTrainer",
    targets=(Target("trl.trainer.utils", "get_peak_flops_per_device", ("56054a4743ed",)),),
    diff="""--- a/trl/trainer/utils.py
+++ b/trl/trainer/utils.py
@@ def get_peak_flops_per_device(accelerator: Accelerator, dtype: str) -> float | None:
+    if accelerator.device.type != "cuda":
+        return None
     device_name = torch.cuda.get_device_name(accelerator.device)
""",
)
