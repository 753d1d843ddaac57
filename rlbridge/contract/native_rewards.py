"""Reward functions written for one engine, used unchanged on every engine.

A reward entry `{native: verl|openrlhf|trl, function: FILE.py:NAME or package.module:NAME}` names a
function in its engine's own calling convention; rlbridge adapts it to the engine-neutral reward
interface (a callable over `RewardInput`s, rlbridge.contract.rewards), so each backend's reward shim
calls it like any reward plugin, with the engine's token ids:

- verl `compute_score(data_source, solution_str, ground_truth, extra_info)`, one sample per call,
  returns a number or a dict with `score` (its other numeric keys become metrics). `data_source` is
  the row's `data_source` column (else 'rlbridge'); `extra_info` is the row.
- OpenRLHF `reward_func(queries, prompts, labels)`, batched, returns `{rewards, scores, extra_logs}`
  (`rewards` is trained on; `extra_logs` become metrics). `queries` is prompt + completion text,
  `labels` the answer column.
- TRL `f(prompts, completions, **kwargs)`, batched, returns one float or None ("not applicable") per
  completion. Keyword arguments as TRL passes them: `completion_ids` (the engine's ids), every row
  column, `trainer_state` (None off TRL), `log_metric(name, value)` (a metric) and `log_extra`.

The entry's `args` are passed as extra keyword arguments on every call. A function whose signature
cannot take its family's arguments is refused when the run is planned, with the signature expected.
"""

from __future__ import annotations

import inspect
import math
import statistics
import threading
from collections.abc import Callable, Sequence
from typing import Any

from rlbridge.contract.local_plugins import load_object
from rlbridge.errors import ConfigError

FAMILIES = ("verl", "openrlhf", "trl")

EXPECTED = {
    "verl": "compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict with 'score'",
    "openrlhf": "reward_func(queries, prompts, labels, **kwargs) -> {'rewards': ..., 'scores': ..., 'extra_logs': {...}}",
    "trl": "f(prompts, completions, **kwargs) -> list[float | None] (kwargs: completion_ids, row columns, trainer_state, log_metric, log_extra)",
}
VERL_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
TRL_ARGS = ("prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra", "environments")


class Scores(list):
    """A reward callable's scores, with the extra metrics the native function reported (name -> one
    value per sample, None where it reported none)."""

    def __init__(self, values, metrics: dict[str, list[float | None]] | None = None) -> None:
        super().__init__(values)
        self.metrics = metrics or {}


def load_native(family: str, function: str, args: dict[str, Any], field: str) -> Callable:
    """The native function, checked against its family's signature (plan time and engine processes)."""
    if family not in FAMILIES:
        raise ConfigError(f"{field}.native: '{family}' is not a reward convention; use one of {', '.join(FAMILIES)}")
    fn = load_object(function, f"{field}.function")
    if not callable(fn):
        raise ConfigError(f"{field}.function: '{function}' is not callable; name a function written as {EXPECTED[family]}")
    problem = signature_problem(family, fn, args)
    if problem:
        raise ConfigError(f"{field}.function: {function} {problem}; a native: {family} reward is {EXPECTED[family]}")
    return fn


def signature_problem(family: str, fn: Callable, args: dict[str, Any]) -> str | None:
    """Why fn cannot be called in its family's convention, or None."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins and C functions: trust the user
    params = sig.parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if family == "openrlhf":
        try:
            sig.bind([], [], [], **args)
        except TypeError as exc:
            return f"cannot be called as reward_func(queries, prompts, labels{', **args' if args else ''}) ({exc})"
        return None
    known = set(VERL_ARGS if family == "verl" else TRL_ARGS) | set(args)
    needs = "solution_str" if family == "verl" else "completions"
    positional_only = [n for n, p in params.items() if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if positional_only:
        return f"has positional-only parameters ({', '.join(positional_only)}), but it is called with keywords"
    if needs not in params and not var_kw:
        return f"has no '{needs}' parameter (its parameters: {', '.join(params) or 'none'})"
    if family == "verl":
        unknown = [n for n, p in params.items() if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in known]
        if unknown:
            return f"requires {', '.join(unknown)}, which verl does not pass (give them in the entry's args)"
    for name in args:
        if name not in params and not var_kw:
            return f"takes no argument '{name}' given in args"
    return None


def native_reward(family: str, function: str, where: str = "reward", /, **args: Any) -> Callable[[Sequence[Any]], Scores]:
    """The engine-neutral reward callable for a native function (the reward entry's factory)."""
    fn = load_native(family, function, args, where)
    adapt = {"verl": _verl, "openrlhf": _openrlhf, "trl": _trl}[family]

    def reward(inputs):
        out = adapt(fn, list(inputs), args)
        reward.last_metrics = metric_means(out)
        return out

    reward.last_metrics = {}  # the extra metrics of the last call, for shims that log them
    reward.__name__ = getattr(fn, "__name__", "native")
    reward.native = (family, function)
    return reward


def _call(fn: Callable, *positional: Any, **kwargs: Any) -> Any:
    """Call fn; an async function is awaited on an event loop of its own (the caller may be inside one)."""
    result = fn(*positional, **kwargs)
    if inspect.isawaitable(result):
        return _await(result)
    return result


def _await(awaitable) -> Any:
    import asyncio  # here: a tenth of `rlbridge plan`'s start-up, and only async reward functions need it

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(awaitable))
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = asyncio.run(_as_coroutine(awaitable))
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=runner)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _as_coroutine(awaitable):
    return await awaitable


def _accepts(fn: Callable) -> tuple[set[str], bool]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set(), True
    return set(params), any(p.kind is p.VAR_KEYWORD for p in params.values())


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    raise ValueError(f"{what} returned {type(value).__name__} {value!r}, not a number")


def _per_sample(value: Any, n: int, what: str) -> list[float | None]:
    """A per-sample sequence (list or tensor) or one number for all, as n floats."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what} has {len(value)} values for {n} samples")
        return [_number(v, what) for v in value]
    number = _number(value, what)
    return [number] * n


def _verl(fn: Callable, inputs: list, args: dict[str, Any]) -> Scores:
    names, var_kw = _accepts(fn)
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
        result = _call(fn, **kwargs, **args)
        if isinstance(result, dict):
            if "score" not in result:
                raise ValueError(f"compute_score returned a dict without 'score' (keys: {', '.join(result)})")
            scores.append(_number(result["score"], "compute_score['score']"))
            for key, value in result.items():
                if key != "score" and isinstance(value, (int, float, bool)) and not isinstance(value, str):
                    metrics.setdefault(key, [None] * len(inputs))[i] = float(value)
        else:
            scores.append(_number(result, "compute_score"))
    return Scores(scores, metrics)


def _openrlhf(fn: Callable, inputs: list, args: dict[str, Any]) -> Scores:
    queries = [x.prompt + x.completion for x in inputs]
    prompts = [x.prompt for x in inputs]
    labels = [x.answer for x in inputs]
    result = _call(fn, queries, prompts, labels, **args)
    if not isinstance(result, dict) or "rewards" not in result:
        got = f"a dict with keys {', '.join(result)}" if isinstance(result, dict) else type(result).__name__
        raise ValueError(f"reward_func must return a dict with 'rewards' (and optionally 'scores', 'extra_logs'); got {got}")
    n = len(inputs)
    scores = _per_sample(result["rewards"], n, "reward_func's 'rewards'")
    metrics = {str(k): _per_sample(v, n, f"reward_func's extra_logs['{k}']") for k, v in (result.get("extra_logs") or {}).items()}
    if result.get("scores") is not None:
        metrics.setdefault("scores", _per_sample(result["scores"], n, "reward_func's 'scores'"))
    return Scores(scores, metrics)


def _trl(fn: Callable, inputs: list, args: dict[str, Any]) -> Scores:
    names, var_kw = _accepts(fn)
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
    for name in names:  # a required column the rows lack: None for every sample
        if name not in offered and name not in args:
            offered[name] = [None] * len(inputs)
    kwargs = {k: v for k, v in offered.items() if var_kw or k in names}
    result = _call(fn, **kwargs, **args)
    if hasattr(result, "tolist"):
        result = result.tolist()
    if not isinstance(result, (list, tuple)) or len(result) != len(inputs):
        size = len(result) if isinstance(result, (list, tuple)) else type(result).__name__
        raise ValueError(f"a TRL reward function must return one float or None per completion; got {size} for {len(inputs)}")
    metrics = {k: [statistics.fmean(v)] * len(inputs) for k, v in logged.items() if v}
    return Scores([_number(v, "the TRL reward function") for v in result], metrics)


def metric_means(scores: Any) -> dict[str, float]:
    """Mean of each extra metric a native reward reported with its scores ({} for other rewards)."""
    out = {}
    for name, values in (getattr(scores, "metrics", None) or {}).items():
        present = [v for v in values if v is not None and not math.isnan(v)]
        if present:
            out[name] = statistics.fmean(present)
    return out


def reward_fn(spec: Any, pm, where: str) -> Callable:
    """The reward callable of one reward entry (a RewardSpec or its JSON form): a native function
    adapted to the neutral interface, or the named plugin's factory called with the entry's args."""
    spec = spec if isinstance(spec, dict) else spec.model_dump(mode="json")
    args = spec.get("args") or {}
    if spec.get("model"):
        from rlbridge.contract.reward_models import model_reward

        return model_reward(spec["model"], where, **args)
    if spec.get("native"):
        return native_reward(spec["native"], spec["function"], where, **args)
    return pm.get("reward", spec["name"], f"{where}.name").factory(**args)


def check_reward_spec(spec: Any, pm, where: str) -> None:
    """Plan-time check of one reward entry: the plugin exists, or the native function loads and fits."""
    spec = spec if isinstance(spec, dict) else spec.model_dump(mode="json")
    if spec.get("model"):
        return  # its path is checked with the run's other models (rlbridge.run.runner.model_paths)
    if spec.get("native"):
        load_native(spec["native"], spec["function"], spec.get("args") or {}, where)
    else:
        pm.get("reward", spec["name"], f"{where}.name")
