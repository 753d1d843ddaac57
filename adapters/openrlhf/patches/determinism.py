"""OpenRLHF 0.11 with training.deterministic (--train.full_determinism_enable): what that flag does
not cover. It makes DeepSpeed deterministic (transformers.enable_full_determinism) and runs vLLM's
engine core in process (VLLM_ENABLE_V1_MULTIPROCESSING=0), but every request still draws from the
engine's one generator in whatever order the engine schedules it, and the rollout results are
collected in the order they finish (ray.wait num_returns=1), which is the order of the training
batches."""

from __future__ import annotations

import functools
import hashlib
import os
from copy import deepcopy

from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import Patch, PatchKind, Target

RANGE = ">=0.11.0,<=0.11.2"
SEED_ENV = "RLBRIDGE_SEED"  # training.seed, in the plan's env when training.deterministic is on


def _deterministic(native: dict) -> bool:
    return "--train.full_determinism_enable" in native.get("args", [])


def request_seed(seed: str, prompt: str, number: int) -> int:
    """A seed of its own for the number-th request an executor serves, the same in every run: requests
    reach a rollout actor in the order the driver dispatches them, and each executor counts its own."""
    return int(hashlib.sha256(f"{seed}:{number}:{prompt}".encode()).hexdigest()[:8], 16)


def _per_request_seeds() -> None:
    def patch(agent):
        for cls in (agent.SingleTurnAgentExecutor, agent.MultiTurnAgentExecutor):
            original = cls.execute
            if getattr(original, "_rlbridge", False):
                continue

            def wrap(original):
                @functools.wraps(original)
                async def execute(self, prompt, label, sampling_params, *args, **kwargs):
                    if getattr(sampling_params, "seed", None) is None:
                        # counted before the first await: coroutines start in the order generate_responses made them
                        number = self.__dict__.get("_rlbridge_requests", 0)
                        self._rlbridge_requests = number + 1
                        sampling_params = deepcopy(sampling_params)
                        sampling_params.seed = request_seed(os.environ.get(SEED_ENV, "0"), str(prompt), number)
                    return await original(self, prompt, label, sampling_params, *args, **kwargs)

                execute._rlbridge = True
                return execute

            cls.execute = wrap(original)

    when_imported("openrlhf.utils.agent", patch)


class _InOrderRay:
    """The `ray` the samples generator sees: `wait(refs, num_returns=1)` returns the first ref of the
    list once it is ready (so results are taken in dispatch order), everything else is Ray itself."""

    def __init__(self, ray) -> None:
        self._ray = ray

    def __getattr__(self, name):
        return getattr(self._ray, name)

    def wait(self, refs, num_returns=1, timeout=None, **kwargs):
        if num_returns != 1 or not refs:
            return self._ray.wait(refs, num_returns=num_returns, timeout=timeout, **kwargs)
        ready, _ = self._ray.wait([refs[0]], num_returns=1, timeout=timeout, **kwargs)
        return (list(ready), list(refs[1:])) if ready else ([], list(refs))


def _ordered_collection() -> None:
    def patch(module):
        if not isinstance(module.ray, _InOrderRay):
            module.ray = _InOrderRay(module.ray)

    when_imported("openrlhf.trainer.ppo_utils.samples_generator", patch)


PER_REQUEST_SEEDS = Patch(
    name="openrlhf-per-request-seeds",
    engine="openrlhf",
    versions=RANGE,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="With --train.full_determinism_enable two runs still sample different completions: every request of a vLLM "
    "engine draws from its one generator (seeded once, vllm_engine.py:269 seed + engine index), in the order the "
    "async engine happens to schedule the group_size requests of each prompt (vllm_engine.py:194 generate_responses)",
    why="Give each request its own sampling seed (SamplingParams.seed), from training.seed, the prompt and the "
    "request's number at its executor: vLLM then samples each request from its own generator, whatever the batch.",
    probe=lambda: True,
    apply=_per_request_seeds,
    when=_deterministic,
    in_native_arms=True,  # the engine's own full_determinism needs it to repeat
    targets=(Target("openrlhf.utils.agent", "SingleTurnAgentExecutor.execute", ("696bec43943c",)),
             Target("openrlhf.utils.agent", "MultiTurnAgentExecutor.execute", ("72618d9f386e",))),
)

ORDERED_COLLECTION = Patch(
    name="openrlhf-ordered-rollout-collection",
    engine="openrlhf",
    versions=RANGE,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="With --train.full_determinism_enable the experiences of a step come in the order their prompts finish "
    "(samples_generator.py:162 ray.wait(pending_refs, num_returns=1)), and that order is the order of the training "
    "micro-batches, so the updates differ run to run",
    why="Take the results in the order the prompts were dispatched (wait for the first pending one): the same "
    "experiences in the same order every run. Generation itself is not slower; only the collection waits in order.",
    probe=lambda: True,
    apply=_ordered_collection,
    when=_deterministic,
    in_native_arms=True,  # the engine's own full_determinism needs it to repeat
    targets=(Target("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._generate_vllm", ("9cf0821a8b1d",)),),
)

PATCHES = [PER_REQUEST_SEEDS, ORDERED_COLLECTION]
