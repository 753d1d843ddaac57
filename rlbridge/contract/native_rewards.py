"""Reward functions written for one engine, used unchanged on every engine.

A reward entry `{native: BACKEND, function: FILE.py:NAME or package.module:NAME}` names a function in
the calling convention of that backend's engine; rlbridge adapts it to the engine-neutral reward
interface (a callable over `RewardInput`s, rlbridge.contract.rewards), so each backend's reward shim
calls it like any reward plugin, with the engine's token ids. Each backend declares its engine's
convention (`Backend.native_reward_convention()`, a NativeConvention: the signature expected, the
signature check, the call), in its adapter (adapters/<engine>/native_reward.py in-tree); this module
holds what they share: the checks of a keyword or a positional convention, number coercion, async
calls, metric means.

The entry's `args` are passed as extra keyword arguments on every call. A function whose signature
cannot take its convention's arguments is refused when the run is planned, with the signature expected.
"""

from __future__ import annotations

import inspect
import math
import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlbridge.contract.local_plugins import load_object
from rlbridge.errors import ConfigError


class Scores(list):
    """A reward callable's scores, with the extra metrics the native function reported (name -> one
    value per sample, None where it reported none)."""

    def __init__(self, values, metrics: dict[str, list[float | None]] | None = None) -> None:
        super().__init__(values)
        self.metrics = metrics or {}


@dataclass(frozen=True)
class NativeConvention:
    """One engine's reward calling convention, declared by its backend (Backend.native_reward_convention)."""

    expected: str
    """The signature as error messages show it, e.g. "f(prompts, completions, **kwargs) -> list[float | None]"."""
    problem: Callable[[inspect.Signature, dict[str, Any]], str | None]
    """Why a function of this signature cannot be called with the entry's args, or None
    (keyword_problem / positional_problem build it)."""
    adapt: Callable[[Callable, list, dict[str, Any]], Scores]
    """Calls the function over a list of RewardInputs with the entry's args; returns its Scores."""


def conventions(pm=None) -> dict[str, NativeConvention]:
    """Backend name -> its reward calling convention, for every registered backend that declares one."""
    if pm is None:
        from rlbridge.contract.registry import get_plugin_manager

        pm = get_plugin_manager()
    found = {name: pm.backend(name).native_reward_convention() for name in sorted(pm.items["backend"])}
    return {name: convention for name, convention in found.items() if convention is not None}


def convention(family: str, field: str, pm=None) -> NativeConvention:
    """The convention `native: family` names, or a ConfigError naming `field`.native and the choices."""
    known = conventions(pm)
    if family not in known:
        raise ConfigError(
            f"{field}.native: '{family}' is not a reward convention; use one of {', '.join(known) or 'none'} "
            "(the backends that declare one)"
        )
    return known[family]


def keyword_problem(
    needs: str, passed: tuple[str, ...] | None = None, engine: str = ""
) -> Callable[[inspect.Signature, dict[str, Any]], str | None]:
    """The check of a convention that calls by keyword: the function takes `needs` (or **kwargs), has
    no required positional-only parameter, and takes every arg of the entry. With `passed` (the
    keywords the engine offers), a required parameter outside them and the args is refused too."""

    def problem(sig: inspect.Signature, args: dict[str, Any]) -> str | None:
        params = sig.parameters
        var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        positional_only = [n for n, p in params.items() if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
        if positional_only:
            return f"has positional-only parameters ({', '.join(positional_only)}), but it is called with keywords"
        if needs not in params and not var_kw:
            return f"has no '{needs}' parameter (its parameters: {', '.join(params) or 'none'})"
        if passed is not None:
            known = set(passed) | set(args)
            unknown = [
                n
                for n, p in params.items()
                if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in known
            ]
            if unknown:
                return f"requires {', '.join(unknown)}, which {engine} does not pass (give them in the entry's args)"
        for name in args:
            if name not in params and not var_kw:
                return f"takes no argument '{name}' given in args"
        return None

    return problem


def positional_problem(call: str, positional: int) -> Callable[[inspect.Signature, dict[str, Any]], str | None]:
    """The check of a convention that passes `positional` arguments, then the entry's args by keyword;
    `call` is how the error shows the call, e.g. "reward_func(queries, prompts, labels"."""

    def problem(sig: inspect.Signature, args: dict[str, Any]) -> str | None:
        try:
            sig.bind(*([[]] * positional), **args)
        except TypeError as exc:
            return f"cannot be called as {call}{', **args' if args else ''}) ({exc})"
        return None

    return problem


def load_native(family: str, function: str, args: dict[str, Any], field: str, pm=None) -> Callable:
    """The native function, checked against its convention's signature (plan time and engine processes)."""
    declared = convention(family, field, pm)
    fn = load_object(function, f"{field}.function")
    if not callable(fn):
        raise ConfigError(
            f"{field}.function: '{function}' is not callable; name a function written as {declared.expected}"
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn  # builtins and C functions: trust the user
    problem = declared.problem(sig, args)
    if problem:
        raise ConfigError(f"{field}.function: {function} {problem}; a native: {family} reward is {declared.expected}")
    return fn


def native_reward(
    family: str, function: str, where: str = "reward", /, **args: Any
) -> Callable[[Sequence[Any]], Scores]:
    """The engine-neutral reward callable for a native function (the reward entry's factory)."""
    return _native_reward(family, function, where, args, None)


def _native_reward(
    family: str, function: str, where: str, args: dict[str, Any], pm
) -> Callable[[Sequence[Any]], Scores]:
    fn = load_native(family, function, args, where, pm)
    adapt = convention(family, where, pm).adapt

    def reward(inputs):
        out = adapt(fn, list(inputs), args)
        reward.last_metrics = metric_means(out)
        return out

    reward.last_metrics = {}  # the extra metrics of the last call, for shims that log them
    reward.__name__ = getattr(fn, "__name__", "native")
    reward.native = (family, function)
    return reward


def call_native(fn: Callable, *positional: Any, **kwargs: Any) -> Any:
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


def accepts(fn: Callable) -> tuple[set[str], bool]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set(), True
    return set(params), any(p.kind is p.VAR_KEYWORD for p in params.values())


def number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    raise ValueError(f"{what} returned {type(value).__name__} {value!r}, not a number")


def per_sample(value: Any, n: int, what: str) -> list[float | None]:
    """A per-sample sequence (list or tensor) or one number for all, as n floats."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what} has {len(value)} values for {n} samples")
        return [number(v, what) for v in value]
    single = number(value, what)
    return [single] * n


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
        return _native_reward(spec["native"], spec["function"], where, args, pm)
    return pm.get("reward", spec["name"], f"{where}.name").factory(**args)


def check_reward_spec(spec: Any, pm, where: str) -> None:
    """Plan-time check of one reward entry: the plugin exists, or the native function loads and fits."""
    spec = spec if isinstance(spec, dict) else spec.model_dump(mode="json")
    if spec.get("model"):
        return  # its path is checked with the run's other models (rlbridge.run.runner.model_paths)
    if spec.get("native"):
        load_native(spec["native"], spec["function"], spec.get("args") or {}, where, pm)
    else:
        pm.get("reward", spec["name"], f"{where}.name")


def check_reward_specs(entries: list[tuple[str, Any]], pm=None) -> list[dict[str, Any]]:
    """check_reward_spec of each (where, spec), every failure as {where, message, missing}: `missing` is the
    top-level module that is not installed (a reward function's package absent here), else None. What the
    engine environment answers to the user's process (`python -m rlbridge.contract.native_rewards`)."""
    if pm is None:
        from rlbridge.contract.registry import get_plugin_manager

        pm = get_plugin_manager()
    failures = []
    for where, spec in entries:
        try:
            check_reward_spec(spec, pm, where)
        except ConfigError as exc:
            cause = exc.__cause__
            missing = cause.name if isinstance(cause, ModuleNotFoundError) and cause.name else None
            failures.append({"where": where, "message": str(exc), "missing": missing and missing.split(".")[0]})
    return failures


def main() -> int:
    """Reads [[where, spec], ...] as JSON on stdin; writes check_reward_specs' failures as JSON on stdout."""
    import json
    import sys

    entries = json.loads(sys.stdin.read())
    failures = check_reward_specs([(where, spec) for where, spec in entries])
    sys.stdout.write("\n" + json.dumps(failures) + "\n")  # the last line: a reward module may print on import
    return 0


if __name__ == "__main__":  # through the imported module: the conventions refer to its functions, not __main__'s
    from rlbridge.contract.native_rewards import main as _main

    raise SystemExit(_main())
