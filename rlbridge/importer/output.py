"""What `rlbridge import` writes of the solved config (rlbridge.importer.solver): the canonical config (only what
differs from the defaults, the search's placeholder reward replaced by the recipe's own rewards, its tracker and run
name) and the notes beside it. rlbridge.importer.report writes them with the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlbridge.contract.config import RunConfig
from rlbridge.importer.config_schema import _MISSING, get_path, leaves, set_path
from rlbridge.importer.solver import _PLACEHOLDER_REWARD, Solver


def output_config(search: Solver, data: dict[str, Any]) -> dict[str, Any]:
    """The canonical config to write: only what differs from the defaults, placeholders removed."""
    config = RunConfig.model_validate(data)
    out = config.model_dump(mode="json", exclude_defaults=True)
    # a value equal to its default but set on purpose stays written when leaving it out would change what
    # the config loads as (training.steps: 100 beside training.epochs: without it, epochs alone clear steps)
    full = config.model_dump(mode="json")
    placeholder = [] if config.is_offline else [_PLACEHOLDER_REWARD]  # an offline stage has no reward
    reloaded = RunConfig.model_validate({**out, "reward": out.get("reward") or placeholder}).model_dump(mode="json")
    for leaf in leaves():
        if get_path(reloaded, leaf.path) != get_path(full, leaf.path) and get_path(full, leaf.path) is not _MISSING:
            out = set_path(out, leaf.path, get_path(full, leaf.path))
    out.pop("run_name", None) if out.get("run_name") == "run" else None
    if not search.explicit_version:
        out.pop("engine_version", None)
    out["reward"] = search.rewards or [r.spec for r in search.recipe_rewards]
    if search.telemetry and search.telemetry.sinks:
        out["telemetry"] = {**out.get("telemetry", {}), "sinks": search.telemetry.sinks}
    if search.telemetry and search.telemetry.run_name:
        out["run_name"] = search.telemetry.run_name
    if search.telemetry and search.telemetry.samples_per_step is not None:
        out["telemetry"] = {**out.get("telemetry", {}), "samples_per_step": search.telemetry.samples_per_step}
    ordered = {"backend": search.backend.name}
    ordered.update({k: v for k, v in out.items() if k != "backend"})
    return ordered


def output_notes(search: Solver, data: dict[str, Any]) -> list[str]:
    """The notes beside the config: the async launch, rewards that did not plan or whose file is not here,
    the engine version not written, no training data."""
    notes = ([search.asynchrony.note] if search.asynchrony and search.asynchrony.note else []) + search.async_notes
    if search.unplanned_rewards:
        notes.append(
            "reward: the recipe's own rewards do not plan on this machine (is the model path there?); "
            "the settings were solved with a placeholder reward"
        )
    files = [] if search.rewards else [r.spec.get("function", "").rpartition(":")[0] for r in search.recipe_rewards]
    files = [f for f in files if f.endswith(".py")]
    missing = [f for f in files if Path(f).is_absolute() and not Path(f).is_file()]
    if missing:
        notes.append(f"reward: {missing[0]} is not on this machine; the config plans where it is (or give --reward)")
    if any(not Path(f).is_absolute() for f in files):
        notes.append(
            "reward: a reward function file's path is as the recipe wrote it (relative to where the recipe was "
            "launched); rlbridge reads FILE.py relative to the config file, so check it there"
        )
    elif (
        not search.rewards
        and (default := search.importer.default_reward) is not None
        and any(r.spec == default.spec for r in search.recipe_rewards)
    ):
        notes.append(default.note)
    elif not search.rewards and not search.recipe_rewards and not search.recipe.extras.get("stage"):
        notes.append(
            "reward: the config has none yet; rlbridge rewards are plugins (`rlbridge plugins`): "
            "add one with --reward NAME or edit reward:, see the 'action' settings above"
        )
    if not search.explicit_version:
        notes.append(
            "engine_version is not written: the plan above was made for "
            f"{search.recipe.engine} {search.recipe.version}, "
            f"and the config plans for whichever {search.recipe.engine} version runs it (--engine-version pins it)"
        )
    if "train" not in data.get("data", {}):
        notes.append(
            "data.train: the recipe names no training data rlbridge can read; "
            "the config keeps rlbridge's default generator"
        )
    return notes
