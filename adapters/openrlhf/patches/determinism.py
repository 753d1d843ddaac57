"""OpenRLHF 0.11 with training.deterministic (--train.full_determinism_enable): what that flag does
not cover. It makes DeepSpeed deterministic (transformers.enable_full_determinism) and runs vLLM's
engine core in process (VLLM_ENABLE_V1_MULTIPROCESSING=0), but the prompt dataloader of the trainer
actor shuffles from an unseeded generator, every request draws from the engine's one generator in
whatever order the engine schedules it, and the rollout results are collected in the order they
finish (ray.wait num_returns=1), which is the order of the training batches."""

from __future__ import annotations

import functools
import hashlib
import os
from copy import deepcopy

from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patches import Patch, PatchKind, Target
from rlbridge.engine.kit import wrap_once

RANGE = ">=0.11.0,<=0.11.2"
SEED_ENV = "RLBRIDGE_SEED"  # training.seed, in the plan's env when training.deterministic is on


def _deterministic(native: dict) -> bool:
    return "--train.full_determinism_enable" in native.get("args", [])


def request_seed(seed: str, prompt: str, dispatched: int, sample: int) -> int:
    """The sampling seed of one sample, the same in every run: from training.seed, the prompt, the
    prompt's number in the run's dispatch order (the samples generator's, fixed by the data order) and
    the sample's number among that prompt's n_samples_per_prompt."""
    return int(hashlib.sha256(f"{seed}:{dispatched}:{sample}:{prompt}".encode()).hexdigest()[:8], 16)


DISPATCHED = "rlbridge_dispatched"  # SamplingParams.extra_args key: the prompt's number in dispatch order
NEXT_SAMPLE = "rlbridge_next_sample"  # and a counter its samples share (one SamplingParams per prompt)


class _NumberingEngine:
    """A rollout actor handle as `_dispatch_prompts_to_vllm` sees it: `generate_responses.remote(...)`
    gets sampling params of its own that carry the prompt's number in dispatch order."""

    def __init__(self, engine, generator) -> None:
        self._engine, self._generator = engine, generator

    def __getattr__(self, name):
        return getattr(self._engine, name)

    @property
    def generate_responses(self):
        engine, generator = self._engine, self._generator

        class _Method:
            @staticmethod
            def remote(*args, sampling_params, **kwargs):
                number = generator.__dict__.get("_rlbridge_dispatched", 0)
                generator._rlbridge_dispatched = number + 1
                params = deepcopy(sampling_params)
                params.extra_args = {**(params.extra_args or {}), DISPATCHED: number}
                return engine.generate_responses.remote(*args, sampling_params=params, **kwargs)

        return _Method()


def _per_request_seeds() -> None:
    def number_prompts(module):
        cls = module.SamplesGenerator

        def make(original):
            @functools.wraps(original)
            def dispatch(self, *args, **kwargs):
                engines = self.vllm_engines
                self.vllm_engines = [_NumberingEngine(engine, self) for engine in engines]
                try:
                    return original(self, *args, **kwargs)
                finally:
                    self.vllm_engines = engines

            return dispatch

        wrap_once(cls, "_dispatch_prompts_to_vllm", make)

    def seed_requests(agent):
        def wrap(original):
            @functools.wraps(original)
            async def execute(self, prompt, label, sampling_params, *args, **kwargs):
                extra = getattr(sampling_params, "extra_args", None) or {}
                if getattr(sampling_params, "seed", None) is None and DISPATCHED in extra:
                    # the n samples of a prompt share one SamplingParams (generate_responses) and start
                    # in the order it made them, before their first await: number them in that order
                    sample = extra.get(NEXT_SAMPLE, 0)
                    extra[NEXT_SAMPLE] = sample + 1
                    sampling_params = deepcopy(sampling_params)
                    sampling_params.seed = request_seed(
                        os.environ.get(SEED_ENV, "0"), str(prompt), extra[DISPATCHED], sample
                    )
                    rest = {k: v for k, v in extra.items() if k not in (DISPATCHED, NEXT_SAMPLE)}
                    sampling_params.extra_args = rest or None
                return await original(self, prompt, label, sampling_params, *args, **kwargs)

            return execute

        for cls in (agent.SingleTurnAgentExecutor, agent.MultiTurnAgentExecutor):
            wrap_once(cls, "execute", wrap)

    when_imported("openrlhf.trainer.ppo_utils.samples_generator", number_prompts)
    when_imported("openrlhf.utils.agent", seed_requests)


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


def _seeded_data_order() -> None:
    def patch(module):
        cls = module.DeepspeedStrategy

        def make(original):
            @functools.wraps(original)
            def setup_dataloader(self, *args, **kwargs):
                loader = original(self, *args, **kwargs)
                sampler = getattr(loader, "sampler", None)
                if type(sampler).__name__ == "RandomSampler":  # not distributed: the loader's own shuffle
                    import torch

                    sampler.generator = torch.Generator().manual_seed(int(self.seed))
                return loader

            return setup_dataloader

        wrap_once(cls, "setup_dataloader", make)

    when_imported("openrlhf.utils.deepspeed.deepspeed", patch)


SEEDED_DATA_ORDER = Patch(
    name="openrlhf-seeded-prompt-order",
    engine="openrlhf",
    versions=RANGE,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="Two runs with the same --train.seed (and --train.full_determinism_enable) train on the prompts in a "
    "different order from step 1: the PPOTrainer actor builds the prompt dataloader without torch.distributed "
    "(deepspeed.py:220 setup_dataloader: no DistributedSampler), so StatefulDataLoader's RandomSampler seeds "
    "itself from torch's global generator, which nothing seeds in that process (setup_distributed, which "
    "seeds, runs only in the model actors); measured: dispatch orders 5555 7777 8888 ... against 0000 8888 7777 ...",
    why="Seed that sampler from the strategy's seed (--train.seed), as the DistributedSampler of the distributed "
    "case is: the same prompt order every run.",
    probe=lambda: True,
    apply=_seeded_data_order,
    when=_deterministic,
    in_native_arms=True,  # the engine's own full_determinism needs it to repeat
    targets=(Target("openrlhf.utils.deepspeed.deepspeed", "DeepspeedStrategy.setup_dataloader", ("8befa57bf2c8",)),),
)

PER_REQUEST_SEEDS = Patch(
    name="openrlhf-per-request-seeds",
    engine="openrlhf",
    versions=RANGE,
    kind=PatchKind.UPSTREAM_BUG,
    fixes="With --train.full_determinism_enable two runs still sample different completions: every request of a vLLM "
    "engine draws from its one generator (seeded once, vllm_engine.py:269 seed + engine index), in the order the "
    "async engine happens to schedule the group_size requests of each prompt (vllm_engine.py:194 generate_responses); "
    "numbering requests as a rollout actor starts them is not enough either, since Ray's async actors run the "
    "generate_responses calls of a step in no fixed order (two runs: prompt 9999 got request numbers 16-19, then 4-7)",
    why="Give each sample its own sampling seed (SamplingParams.seed) from training.seed, the prompt, its number in "
    "the samples generator's dispatch order (fixed by the data order) and the sample's number within the prompt: "
    "vLLM then samples each request from its own generator, whatever the batch or the arrival order.",
    probe=lambda: True,
    apply=_per_request_seeds,
    when=_deterministic,
    in_native_arms=True,  # the engine's own full_determinism needs it to repeat
    targets=(
        Target(
            "openrlhf.trainer.ppo_utils.samples_generator",
            "SamplesGenerator._dispatch_prompts_to_vllm",
            ("5f140652a33c",),
        ),
        Target("openrlhf.trainer.ray.vllm_engine", "RolloutRayActor.generate_responses", ("5b184ef693cd",)),
        Target("openrlhf.utils.agent", "SingleTurnAgentExecutor.execute", ("696bec43943c",)),
        Target("openrlhf.utils.agent", "MultiTurnAgentExecutor.execute", ("72618d9f386e",)),
    ),
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
    targets=(
        Target("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator._generate_vllm", ("9cf0821a8b1d",)),
    ),
)

PATCHES = [SEEDED_DATA_ORDER, PER_REQUEST_SEEDS, ORDERED_COLLECTION]
