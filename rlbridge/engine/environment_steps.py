"""Environment steps and tool calls inside engine processes, through the run's worker pool
(rlbridge.engine.workers): a step that hangs, crashes its worker, raises or returns a non-finite
reward is a fault like a reward plugin's; the episode's state comes back from the worker after each
call; an environment a worker cannot import or unpickle runs inline (said once). What the adapters'
multi-turn shims call (verl's agent loop and tools, OpenRLHF's agent, TRL's rollout)."""

from __future__ import annotations

import math
import traceback
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from rlbridge.contract.rewards import RewardInput
from rlbridge.engine.events import reward_faults, write_event
from rlbridge.engine.workers import (
    Fault,
    RewardScorer,
    _first_lines,
    _import_path,
    _resolve_factory,
    engine_scorer,
    log,
)


def _env_step(env: Any, action: str) -> tuple[Any, Any]:
    """One task: an episode's step in a worker; the episode's state comes back with the result."""
    result = env.step(action)
    return env, result


_env_inline: dict[type, str] = {}


def _env_portable(env: Any) -> str:
    """'' if the episode can be stepped in a worker (its class importable by path and its state
    picklable), else why not; checked once per class."""
    import pickle

    cls = type(env)
    if cls not in _env_inline:
        ref = _import_path(cls)
        try:
            same = ref is not None and _resolve_factory({"factory": ref}, 0) is cls
            pickle.loads(pickle.dumps(env))
            _env_inline[cls] = "" if same else "its class is not importable by a worker process"
        except Exception as exc:
            _env_inline[cls] = f"its state does not pickle ({type(exc).__name__}: {exc})"
        if _env_inline[cls]:
            log.warning("environment %s is stepped inline, without a timeout: %s", cls.__name__, _env_inline[cls])
    return _env_inline[cls]


def _env_tool(env: Any, name: str, arguments: dict) -> tuple[Any, Any]:
    """One task: one of an episode's tools in a worker; the episode's state comes back with the text."""
    return env, getattr(env, name)(**arguments)


def call_environment_tool(env: Any, name: str, arguments: dict, scorer: RewardScorer | None = None) -> str:
    """`env.<name>(**arguments)`, one of the environment's tools, through the run's worker pool (as
    step_environment: the episode's state comes back; an environment that cannot go to a worker
    runs inline). Thread-safe, so that a rollout loop can run several episodes' calls at once. A
    tool that raises, runs past rollout_workers.timeout_s (TimeoutError) or kills its worker
    (RuntimeError) raises here: the caller turns that into the text the policy sees."""
    scorer = scorer or engine_scorer()
    if scorer.settings.mode not in ("process", "ray") or _env_portable(env):
        return str(getattr(env, name)(**arguments))
    new_env, text = scorer.call(_env_tool, env, name, arguments)
    env.__dict__.update(new_env.__dict__)
    return str(text)


def tool_call_text(env: Any, name: str | None, arguments: Any, scorer: RewardScorer | None = None) -> str:
    """The text the policy sees for one parsed tool call (rlbridge.contract.environments.parse_tool_calls):
    the tool's output through call_environment_tool, or an error message (an unparsable call, an
    unknown tool, arguments that are no object, a tool that raised), as TRL's and verl's tool loops do."""
    if name is None:
        return str(arguments)
    tools = type(env).tools
    if name not in tools:
        return f"Unknown function '{name}'. Available tools: {sorted(tools)}"
    if not isinstance(arguments, dict):
        return f"Invalid arguments for '{name}': expected an object, got {arguments!r}"
    try:
        return call_environment_tool(env, name, arguments, scorer)
    except Exception as exc:
        return f"Error executing tool '{name}': {type(exc).__name__}: {exc}"


def step_environment(env: Any, action: str, scorer: RewardScorer | None = None) -> Any:
    """`env.step(action)` through the run's worker pool: a step that hangs, crashes its worker,
    raises or returns a NaN/inf reward is counted like a reward fault (reward/timeouts, ...) and,
    unless on_error is fail, ends the episode with reward 0. The episode's state (the instance's
    attributes) comes back from the worker after every step. An environment whose class a worker
    cannot import, or whose state does not pickle, is stepped inline (said once in the log)."""
    from rlbridge.contract.environments import StepResult

    scorer = scorer or engine_scorer()
    pool = None
    if scorer.settings.mode in ("process", "ray") and not _env_portable(env):
        pool = scorer._get_pool()
    outcome, message = None, ""
    if pool is None:
        try:
            result = env.step(action)
        except Exception:
            outcome, message = "errors", _first_lines(traceback.format_exc())
    else:
        import pebble

        fut = pool.schedule(_env_step, args=(env, action), timeout=scorer.settings.timeout_s)
        try:
            new_env, result = fut.result()
            env.__dict__.update(new_env.__dict__)
        except FutureTimeout:
            outcome, message = (
                "timeouts",
                f"ran past rollout_workers.timeout_s ({scorer.settings.timeout_s} s); "
                "its worker was killed and replaced",
            )
        except pebble.ProcessExpired as exc:
            outcome, message = "crashes", f"its worker process died (exit code {exc.exitcode})"
        except Exception as exc:
            outcome, message = "errors", _first_lines(getattr(exc, "traceback", "") or f"{type(exc).__name__}: {exc}")
    if outcome is None:
        try:
            reward = float(result.reward)
        except (TypeError, ValueError, AttributeError):
            outcome, message = (
                "invalid",
                f"step returned {type(result).__name__}, not a StepResult with a numeric reward",
            )
        else:
            if not math.isfinite(reward):
                outcome, message = "nonfinite", f"step reward {reward}"
    if outcome is None:
        return result
    name = f"environment:{type(env).__name__}"
    x = RewardInput(prompt="", completion=action, completion_ids=[])
    try:
        scorer._finish([x], {name: [None]}, [Fault(name, outcome, message, 0)])  # counts, logs, applies fail/threshold
    finally:
        write_event(reward_faults({outcome: 1}))  # to the launcher's per-step metrics (engine runs)
    return StepResult(reward=0.0, done=True, feedback="")
