"""The whole plugin contract of rlbridge, as pluggy hook specifications.

A plugin is any module or object with functions named like these hooks and marked with
`rlbridge.hookimpl`. Packages register plugins through the `rlbridge` entry-point group; the
built-in backends and plugins use that same group (see pyproject.toml). `rlbridge plugins` lists
what is registered and where it came from.

Two kinds of hooks:

* Registration hooks (`rlbridge_register_*`) are called once, when the plugin manager is first
  used, and return a list of descriptors (`rlbridge.contract.registry`). Names must be unique across all
  plugins; a clash is an error that names both providers. Registration hooks must stay cheap: import
  no torch or engine at module level or inside them (the descriptors load their implementation
  lazily), so that `rlbridge plan` and `rlbridge --help` stay light.
* Lifecycle hooks (`rlbridge_run_start`, `rlbridge_step_end`, `rlbridge_checkpoint_saved`,
  `rlbridge_run_end`, `rlbridge_run_failed`) are called in the user's process (the one that ran
  `rlbridge train` or `rlbridge.run.runner.train`), never inside an engine process: whatever process
  or environment the engine trains in, its steps and checkpoints travel back as events
  (engine.events and engine.follower, launch) and the hooks run where the run started. Order:
  run_start, then step_end once per training step with checkpoint_saved between steps when the
  engine saved one, then exactly one of run_end or run_failed. Their return values are ignored
  (every implementation is called; nothing is combined). Implementations may take any subset of a
  hook's parameters (pluggy passes only those named).

  Two kinds of implementations receive them. Plugins registered through the entry-point group: an
  exception they raise fails the run. Telemetry sinks (`telemetry.sinks`, see
  `rlbridge_register_telemetry_sinks`): objects whose `@hookimpl` methods are named like these hooks,
  registered for one run only (`rlbridge.run.sinks`); for step_end and checkpoint_saved they are
  called before the plugins (so a step written to metrics.jsonl reaches them even when a plugin then
  fails the run), for run_start, run_end and run_failed after them, one sink at a time; a sink that
  raises is reported with its name (stderr and summary.json's `sink_errors`), closed and
  unregistered, while metrics.jsonl and the other sinks go on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pluggy

from rlbridge.contract.descriptors import (
    DataSourcePlugin,
    EnvironmentPlugin,
    ModelBuilderPlugin,
    PlacementPolicy,
    RewardPlugin,
    TelemetrySinkPlugin,
)

PROJECT = "rlbridge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:  # types only: backend and config import nothing from here, so no cycle either way
    from rlbridge.contract.backend import Backend, Plan
    from rlbridge.contract.config import RunConfig


# --- registration -------------------------------------------------------------------------------


@hookspec
def rlbridge_register_backends() -> list[type[Backend]]:
    """Return the Backend classes this plugin provides (one per engine, e.g. TRLBackend).

    Called once per process when backends are first looked up: in the user's process (plan, train)
    and in an engine environment's child process (`rlbridge.engine.child`). The class must not import
    its engine at class definition time; it imports it in `run()` (and in helpers only `run()` and
    tests call). Results of all plugins are concatenated.
    """


@hookspec
def rlbridge_register_rewards() -> list[RewardPlugin]:
    """Return reward plugins (`rlbridge.contract.registry.RewardPlugin`): a name, a factory and a description.

    The factory is called with the `args` of the config's reward entry and returns a callable that
    takes a list of `rlbridge.contract.rewards.RewardInput` and returns one float (or None: not applicable)
    per input. Called once per process when rewards are first looked up: in the user's process
    (plan-time checks; the scoring of engines that train in it, such as TRL) and in every engine
    process that scores (verl's reward workers, OpenRLHF's reward function, the worker pool's
    processes). Results of all plugins are concatenated.
    """


@hookspec
def rlbridge_register_environments() -> list[EnvironmentPlugin]:
    """Return environment plugins (multi-turn episodes, tools): a name, a factory and a description.

    Called once per process when environments are first looked up: in the user's process (plan-time
    checks) and in the engine processes that run episodes (verl's agent-loop workers, OpenRLHF's
    agent executor, TRL's rollout function). Results of all plugins are concatenated.
    """


@hookspec
def rlbridge_register_data_sources() -> list[DataSourcePlugin]:
    """Return data-source plugins for `data.*.type: generator`: a name and a function
    `(**args) -> list[dict]` that makes the rows. Called once, in the user's process (where rows are
    made and written for the engine), when data sources are first looked up; results concatenated.
    """


@hookspec
def rlbridge_register_model_builders() -> list[ModelBuilderPlugin]:
    """Return model builders for `model.path: builtin:NAME`: a function `(model_dir) -> path`, called
    with the model's own directory in rlbridge's cache (`<cache>/models/NAME`), that creates the model
    there (weights, config, tokenizer) locally if it is missing, and returns the path to load.
    Called once when model builders are first looked up, in the user's process or the engine
    environment's child process (whichever materialises the model first); results concatenated.
    """


@hookspec
def rlbridge_register_placement_policies() -> list[PlacementPolicy]:
    """Return placement policies for `placement.policy`: a name and a function `(config) -> layout`
    that turns the resolved RunConfig (its `resources` and `placement.args`) into {role: device count,
    "shared": bool} (e.g. colocate's {"actor": 2, "rollout": 2, "reference": 2, "shared": True}),
    raising ConfigError (naming placement.args) when impossible.
    Called once, in the user's process (the layout is part of the plan), when placement policies
    are first looked up; results concatenated.
    """


@hookspec
def rlbridge_register_telemetry_sinks() -> list[TelemetrySinkPlugin]:
    """Return telemetry sinks for `telemetry.sinks`: a name and a factory `(run_dir, **args)`.

    Called once, in the user's process, when sinks are first looked up; results of all plugins are
    concatenated. For a run, the runner calls each configured sink's factory with the run directory
    and the entry's `args`; the object it returns implements any of the lifecycle hooks below as
    methods marked `@hookimpl` (e.g. `def rlbridge_step_end(self, step, metrics): ...`) and is
    registered for that run only. Built in: console, csv, tensorboard, mlflow, wandb
    (`rlbridge_plugins.telemetry`).
    """


# --- run lifecycle ------------------------------------------------------------------------------


@hookspec
def rlbridge_run_start(config: RunConfig, plan: Plan, run_dir: str) -> None:
    """Called once, in the user's process, before the engine starts, after every pre-flight check
    passed and config.yaml and plan.yaml were written to `run_dir`.

    `config` is the resolved `RunConfig`, `plan` the engine-native `Plan`, `run_dir` the run's
    output directory. Return values are ignored.
    """


@hookspec
def rlbridge_step_end(
    step: int,
    metrics: dict[str, float],
    native: dict[str, float],
    samples: list[dict[str, Any]],
    rewards: list[float],
) -> None:
    """Called once per training step, in the user's process, after the step's line was written to
    metrics.jsonl (and its sampled rows to samples.jsonl).

    `step` counts training steps from 1 (one rollout batch and its updates). `metrics` holds only
    canonical names (`rlbridge.contract.metrics`) with finite float values; which names appear depends
    on the engine and the config. `native` is the engine's own log of the step, numbers only
    (native_metrics.jsonl). `samples` is up to `telemetry.samples_per_step` rows scored in the step,
    each `{"prompt", "completion", "reward", "rewards": {plugin: score}}`, as the engine's reward
    scoring saw them (empty when the engine reported none). `rewards` is the total reward of every
    sample scored in the step (for histograms; may be empty). Return values are ignored.
    """


@hookspec
def rlbridge_checkpoint_saved(step: int, path: str) -> None:
    """Called in the user's process after the engine wrote a checkpoint for training step `step`
    at `path` (a directory of the engine's checkpoint layout). Return values are ignored."""


@hookspec
def rlbridge_run_end(summary: dict[str, Any]) -> None:
    """Called once, in the user's process, when training finished, after summary.json, metrics.jsonl
    and reward.png were written; `summary` is what summary.json holds (status 'completed').
    Return values are ignored."""


@hookspec
def rlbridge_run_failed(error: BaseException, summary: dict[str, Any]) -> None:
    """Called once, in the user's process, when the run failed or was interrupted, after summary.json
    and error.txt were written; `summary` is what summary.json holds (status 'failed' or
    'interrupted', `error` the one-line message). `error` is the exception, re-raised after the hooks
    ran. Return values are ignored."""


# --- inside engine processes --------------------------------------------------------------------


@hookspec(firstresult=True)
def rlbridge_weight_sync(engine: str, weights: Iterable[tuple[str, Any]]) -> Iterable[tuple[str, Any]] | None:
    """Called inside the engine process that hands updated weights to the rollout engine (verl's
    rollout worker, TRL's trainer process), once per weight sync, before anything is sent.

    `engine` is the backend's name; `weights` is the engine's own iterable of (parameter name,
    tensor) in the order it would send them, consumed at most once. Return an iterable of (name,
    tensor) to send instead (only the changed tensors, re-typed or re-bucketed ones, or the engine's
    own, counted: the rollout engine loads whatever arrives by name), or None to leave the transfer
    as the engine does it. The first implementation that returns non-None wins (pluggy
    firstresult). The bytes and tensors actually sent are measured after it, as
    `weight_sync/bytes` and `weight_sync/tensors`. Plugins reach engine processes through the
    `rlbridge` entry-point group or the config's `plugins:`. Where an engine has no such seam
    (OpenRLHF sends from inside its actor's broadcast loop), the hook is not called.
    """
