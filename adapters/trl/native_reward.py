"""TRL's reward calling convention, for `native: trl` reward entries on any backend
(rlbridge.contract.native_rewards): `f(prompts, completions, **kwargs)`, batched, returns one float
or None ("not applicable") per completion. Keyword arguments as TRL passes them: `completion_ids`
(the engine's ids), every row column, `trainer_state` (None off TRL), `log_metric(name, value)` (a
metric) and `log_extra`."""

from __future__ import annotations

import inspect
import statistics
from collections.abc import Callable
from typing import Any

from rlbridge.contract.native_rewards import NativeConvention, Scores, accepts, call_native, keyword_problem, number


def required_parameters(fn: Callable) -> list[str]:
    """Parameters without a default: a defaulted one the rows lack keeps its default, as in TRL, which
    passes only the columns it has."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in plain and p.default is inspect.Parameter.empty]


def call(fn: Callable, inputs: list, args: dict[str, Any]) -> Scores:
    names, var_kw = accepts(fn)
    logged: dict[str, list[float]] = {}
    columns = sorted({k for x in inputs for k in x.metadata})
    offered: dict[str, Any] = {
        "prompts": [x.prompt for x in inputs],
        "completions": [x.completion for x in inputs],
        "completion_ids": [list(x.completion_ids) for x in inputs],
        "trainer_state": None,
        "log_metric": lambda name, value: logged.setdefault(str(name), []).append(float(value)),
        "log_extra": lambda column, values: None,
    }
    for column in columns:
        offered.setdefault(column, [x.metadata.get(column) for x in inputs])
    for name in required_parameters(fn):  # a required column the rows lack: None for every sample
        if name not in offered and name not in args:
            offered[name] = [None] * len(inputs)
    kwargs = {k: v for k, v in offered.items() if var_kw or k in names}
    result = call_native(fn, **kwargs, **args)
    if hasattr(result, "tolist"):
        result = result.tolist()
    if not isinstance(result, (list, tuple)) or len(result) != len(inputs):
        size = len(result) if isinstance(result, (list, tuple)) else type(result).__name__
        raise ValueError(
            f"a TRL reward function must return one float or None per completion; got {size} for {len(inputs)}"
        )
    metrics = {k: [statistics.fmean(v)] * len(inputs) for k, v in logged.items() if v}
    return Scores([number(v, "the TRL reward function") for v in result], metrics)


CONVENTION = NativeConvention(
    expected="f(prompts, completions, **kwargs) -> list[float | None] "
    "(kwargs: completion_ids, row columns, trainer_state, log_metric, log_extra)",
    problem=keyword_problem("completions"),
    adapt=call,
)
