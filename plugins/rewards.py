"""Built-in reward plugins. Each factory takes the reward entry's args and returns a callable
over a list of `rlbridge.contract.rewards.RewardInput`."""

from __future__ import annotations

from collections.abc import Sequence

from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin
from rlbridge.contract.rewards import RewardInput


def digit_match(digit_key: str | None = None):
    """Fraction of generated tokens that are the answer digit.

    The denominator counts every generated token, special tokens included (completion_ids), so a
    policy cannot raise the score with tokens that the decoded text does not show.
    """

    def reward(inputs: Sequence[RewardInput]) -> list[float]:
        out = []
        for x in inputs:
            target = str(x.metadata[digit_key] if digit_key else x.answer)
            n_tokens = max(len(x.completion_ids), 1)
            out.append(min(x.completion.count(target), n_tokens) / n_tokens)
        return out

    return reward


def exact_match(strip: bool = True, case_sensitive: bool = True):
    """1.0 when the completion equals the answer (after stripping whitespace), else 0.0."""

    def norm(text: str) -> str:
        text = text.strip() if strip else text
        return text if case_sensitive else text.lower()

    def reward(inputs: Sequence[RewardInput]) -> list[float]:
        return [float(norm(x.completion) == norm(str(x.answer))) for x in inputs]

    return reward


def contains_answer(case_sensitive: bool = True):
    """1.0 when the answer appears anywhere in the completion, else 0.0."""

    def reward(inputs: Sequence[RewardInput]) -> list[float]:
        if case_sensitive:
            return [float(str(x.answer) in x.completion) for x in inputs]
        return [float(str(x.answer).lower() in x.completion.lower()) for x in inputs]

    return reward


def length_penalty(target_tokens: int = 16):
    """-(|tokens - target| / target): 0 at the target length, more negative away from it."""
    if target_tokens < 1:
        raise ValueError("length_penalty: target_tokens must be >= 1")

    def reward(inputs: Sequence[RewardInput]) -> list[float]:
        return [-abs(len(x.completion_ids) - target_tokens) / target_tokens for x in inputs]

    return reward


def remote_digit_match(min_ms: float = 50.0, max_ms: float = 200.0, digit_key: str | None = None):
    """digit_match behind a remote call: each sample waits min_ms-max_ms first, as a tool call or a
    sandbox over the network does (the wait is fixed per completion text, so every arm of a bench
    waits the same for the same sample). A latency-bound workload for the asynchronous loop
    (configs/bench-async.yaml): the wait is wall time, not CPU, so generation can overlap it."""
    import time
    import zlib

    if not 0 <= min_ms <= max_ms:
        raise ValueError("remote_digit_match: need 0 <= min_ms <= max_ms")
    score = digit_match(digit_key)

    def reward(inputs: Sequence[RewardInput]) -> list[float]:
        for x in inputs:
            fraction = zlib.crc32(x.completion.encode()) / 0xFFFFFFFF
            time.sleep((min_ms + fraction * (max_ms - min_ms)) / 1000.0)
        return score(inputs)

    return reward


@hookimpl
def rlbridge_register_rewards():
    # pure string functions of the sample: scored in the engine process, no worker pool to start
    return [
        RewardPlugin(
            "digit_match", digit_match, "fraction of generated tokens equal to the answer digit", isolate=False
        ),
        RewardPlugin("exact_match", exact_match, "1 if the completion equals the answer", isolate=False),
        RewardPlugin("contains_answer", contains_answer, "1 if the answer occurs in the completion", isolate=False),
        RewardPlugin(
            "length_penalty", length_penalty, "penalty for distance from a target length in tokens", isolate=False
        ),
        # waits like a remote call: in the worker pool, where a wait blocks no engine process
        RewardPlugin(
            "remote_digit_match", remote_digit_match, "digit_match after a 50-200 ms wait per sample (a remote call)"
        ),
    ]
