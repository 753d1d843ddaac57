"""Runs inside the vLLM server that rlbridge starts for TRL's asynchronous trainer (vllm_server.py), as the
worker extension class of every vLLM worker (`vllm serve --worker-extension-cls`): the receiving end of
rlbridge's weight sync, which works without CUDA.

TRL 1.16's own `WeightTransferClient` streams weights over vLLM's NCCL transfer engine (a CUDA-only
collective). Here the trainer writes the weights to one safetensors file in shared memory (/dev/shm) and
calls `/collective_rpc` with `rlbridge_load_weights`; each worker loads that file into its model with
vLLM's own `model.load_weights`, the same loader vLLM's NCCL engine ends in. On vLLM-CPU the module first
makes linear layers read `layer.weight` directly (the trl-vllm-cpu-unpacked-linear patch): vLLM
resolves this class before it loads the model, so the weights it loads are never prepacked and every sync
is seen at once. Imports vLLM only in the server's processes.
"""

from __future__ import annotations

from rlbridge.engine.patches import apply_patches
from rlbridge_adapters.trl.patches.vllm_cpu_linear import VLLM_CPU_LINEAR

# through the patch system, so that the run's patch report lists the server's processes too
apply_patches([VLLM_CPU_LINEAR], {"args": {"use_vllm": True, "use_cpu": True}})


class SafetensorsWeightLoader:
    """Mixed into vLLM's worker class; its methods are callable through the server's /collective_rpc."""

    def rlbridge_load_weights(self, path: str) -> int:
        """Load every tensor of the safetensors file at `path` into the served model; returns how many."""
        from safetensors.torch import load_file

        weights = load_file(path)
        self.model_runner.model.load_weights(weights=list(weights.items()))
        return len(weights)
