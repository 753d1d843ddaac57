"""OpenRLHF's reward calling convention, for `native: openrlhf` reward entries on any backend
(rlbridge.contract.native_rewards): `reward_func(queries, prompts, labels)`, batched, returns
`{rewards, scores, extra_logs}` (`rewards` is trained on; `extra_logs` become metrics). `queries` is
prompt + completion text, `labels` the answer column."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlbridge.contract.native_rewards import NativeConvention, Scores, call_native, per_sample, positional_problem


def call(fn: Callable, inputs: list, args: dict[str, Any]) -> Scores:
    queries = [x.prompt + x.completion for x in inputs]
    prompts = [x.prompt for x in inputs]
    labels = [x.answer for x in inputs]
    result = call_native(fn, queries, prompts, labels, **args)
    if not isinstance(result, dict) or "rewards" not in result:
        got = f"a dict with keys {', '.join(result)}" if isinstance(result, dict) else type(result).__name__
        raise ValueError(
            f"reward_func must return a dict with 'rewards' (and optionally 'scores', 'extra_logs'); got {got}"
        )
    n = len(inputs)
    scores = per_sample(result["rewards"], n, "reward_func's 'rewards'")
    metrics = {
        str(k): per_sample(v, n, f"reward_func's extra_logs['{k}']")
        for k, v in (result.get("extra_logs") or {}).items()
    }
    if result.get("scores") is not None:
        metrics.setdefault("scores", per_sample(result["scores"], n, "reward_func's 'scores'"))
    return Scores(scores, metrics)


CONVENTION = NativeConvention(
    expected="reward_func(queries, prompts, labels, **kwargs) -> {'rewards': ..., 'scores': ..., 'extra_logs': {...}}",
    problem=positional_problem("reward_func(queries, prompts, labels", 3),
    adapt=call,
)
