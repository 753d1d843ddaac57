"""verl's reward calling convention, for `native: verl` reward entries on any backend
(rlbridge.contract.native_rewards): `compute_score(data_source, solution_str, ground_truth,
extra_info)`, one sample per call, returns a number or a dict with `score` (its other numeric keys
become metrics). `data_source` is the row's `data_source` column (else 'rlbridge'); `extra_info` is
the row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlbridge.contract.native_rewards import NativeConvention, Scores, accepts, call_native, keyword_problem, number

PASSED = ("data_source", "solution_str", "ground_truth", "extra_info")


def call(fn: Callable, inputs: list, args: dict[str, Any]) -> Scores:
    names, var_kw = accepts(fn)
    scores: list[float | None] = []
    metrics: dict[str, list[float | None]] = {}
    for i, x in enumerate(inputs):
        offered = {
            "data_source": x.metadata.get("data_source", "rlbridge"),
            "solution_str": x.completion,
            "ground_truth": x.answer,
            "extra_info": dict(x.metadata),
        }
        kwargs = {k: v for k, v in offered.items() if var_kw or k in names}
        result = call_native(fn, **kwargs, **args)
        if isinstance(result, dict):
            if "score" not in result:
                raise ValueError(f"compute_score returned a dict without 'score' (keys: {', '.join(result)})")
            scores.append(number(result["score"], "compute_score['score']"))
            for key, value in result.items():
                if key != "score" and isinstance(value, (int, float, bool)) and not isinstance(value, str):
                    metrics.setdefault(key, [None] * len(inputs))[i] = float(value)
        else:
            scores.append(number(result, "compute_score"))
    return Scores(scores, metrics)


CONVENTION = NativeConvention(
    expected="compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) "
    "-> float | dict with 'score'",
    problem=keyword_problem("solution_str", passed=PASSED, engine="verl"),
    adapt=call,
)
