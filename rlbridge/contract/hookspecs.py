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
* Lifecycle hooks (`rlbridge_run_*`, `rlbridge_step_end`, ...) are called by the runner in the
  user's process, in this order: run_start, step_end (once per training step), checkpoint_saved
  (when the engine saved one), then run_end or run_failed. Their return values are ignored. An
  exception raised by a lifecycle hook fails the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

PROJECT = "rlbridge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

from rlbridge.contract.descriptors import (
    DataSourcePlugin,
    EnvironmentPlugin,
    ModelBuilderPlugin,
    PlacementPolicy,
    RewardPlugin,
    TelemetrySinkPlugin,
)

if TYPE_CHECKING:  # types only: backend and config import nothing from here, so no cycle either way
    from rlbridge.contract.backend import Backend, Plan
    from rlbridge.contract.config import RunConfig


# --- registration -------------------------------------------------------------------------------


@hookspec
def rlbridge_register_backends() -> list[type[Backend]]:
    """Return the Backend classes this plugin provides (one per engine, e.g. TRLBackend).

    Called once when backends are first looked up. The class must not import its engine at class
    definition time; it imports it in `run()` (and in helpers only `run()` and tests call).
    """


@hookspec
def rlbridge_register_rewards() -> list[RewardPlugin]:
    """Return reward plugins (`rlbridge.contract.registry.RewardPlugin`): a name, a factory and a description.

    The factory is called with the `args` of the config's reward entry and returns a callable that
    takes a list of `rlbridge.contract.rewards.RewardInput` and returns one float (or None: not applicable)
    per input. Called once when rewards are first looked up.
    """


@hookspec
def rlbridge_register_environments() -> list[EnvironmentPlugin]:
    """Return environment plugins (multi-turn episodes, tools): a name, a factory and a description.

    Called once when environments are first looked up.
    """


@hookspec
def rlbridge_register_data_sources() -> list[DataSourcePlugin]:
    """Return data-source plugins for `data.*.type: generator`: a name and a function
    `(**args) -> list[dict]` that makes the rows. Called once when data sources are first looked up.
    """


@hookspec
def rlbridge_register_model_builders() -> list[ModelBuilderPlugin]:
    """Return model builders for `model.path: builtin:NAME`: a function `(cache_dir, seed) -> path`
    that creates a model directory (weights, config, tokenizer) locally, idempotently.
    Called once when model builders are first looked up.
    """


@hookspec
def rlbridge_register_placement_policies() -> list[PlacementPolicy]:
    """Return placement policies for `placement.policy`: a name and a function that turns
    (config, resources) into a role -> devices layout, raising RLBridgeError when impossible.
    Called once when placement policies are first looked up.
    """


@hookspec
def rlbridge_register_telemetry_sinks() -> list[TelemetrySinkPlugin]:
    """Return telemetry sinks for `telemetry.sinks`: a name and a factory `(run_dir, **args)`
    returning an object with any of the lifecycle methods `run_start(config, plan)`,
    `step_end(step, metrics)`, `checkpoint_saved(step, path)`, `run_end(summary)`,
    `run_failed(error)`. Called once when sinks are first looked up.
    """


# --- run lifecycle ------------------------------------------------------------------------------


@hookspec
def rlbridge_run_start(config: RunConfig, plan: Plan, run_dir: str) -> None:
    """Called once before the engine starts, after the plan was made and written to run_dir."""


@hookspec
def rlbridge_step_end(step: int, metrics: dict[str, float]) -> None:
    """Called after every training step with canonical metrics (`rlbridge.contract.metrics`).

    `step` counts training steps from 1 (one rollout batch and its updates). `metrics` holds only
    canonical names with finite float values; which names appear depends on the engine and the config.
    """


@hookspec
def rlbridge_checkpoint_saved(step: int, path: str) -> None:
    """Called after the engine wrote a checkpoint for training step `step` at `path`."""


@hookspec
def rlbridge_run_end(summary: dict[str, Any]) -> None:
    """Called once when training finished; `summary` is what summary.json holds."""


@hookspec
def rlbridge_run_failed(error: BaseException, summary: dict[str, Any]) -> None:
    """Called once when the run failed or was interrupted; `summary` is what summary.json holds
    (status 'failed' or 'interrupted'). The error is re-raised after the hooks ran."""
