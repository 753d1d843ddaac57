"""The engine's own defaults that a plan changes, each with its reason: the import report's 'differs'
(rlbridge.importer.verdicts) and `rlbridge plan --explain`; and how both show the knobs that move a native key."""

from __future__ import annotations

from typing import Any

from rlbridge.contract.backend import Backend
from rlbridge.contract.config import RunConfig
from rlbridge.contract.importing import Recipe, Setting, same, show_value
from rlbridge.errors import RLBridgeError
from rlbridge.importer.config_schema import _default_at, _dump, _value_at
from rlbridge.importer.report import Difference


def default_differences(
    backend: Backend,
    config: RunConfig,
    native: dict[str, Any],
    skip: set[str] = frozenset(),
    knobs_of: dict[str, list[str]] | None = None,
    recipe: Recipe | None = None,
) -> list[Difference]:
    """Every key of the engine's own defaults that the plan sets to another value (keys in `skip`, the
    recipe's own, left out), each with the reason: the adapter's stated one (`difference_reason`), else the
    canonical knob that sets it. A key the plan leaves out keeps the engine's default."""
    importer = backend.recipe_importer()
    if importer is None:
        return []
    version = (
        str(backend.target_version(config))
        if config.engine_version or backend.installed_version()
        else importer.default_version
    )
    extras = {"config_class": native["config_class"]} if "config_class" in native else {}
    if recipe is None:  # plan --explain: the engine's defaults of an empty recipe
        recipe = Recipe(backend.name, "<plan>", version, [], extras=extras)
    # every default the engine has (the solver's own list may leave out run bookkeeping such as verl's resume_mode)
    try:
        defaults = importer.engine_defaults(recipe)
    except RLBridgeError:
        return []
    view = importer.view(native, config)
    owners = backend.owned_native_keys()
    out = []
    for key, value in defaults.items():
        if key in skip or key not in view or same(view[key], value) or importer.special(Setting(key, value)):
            continue
        if isinstance(value, str) and ("${" in value or "rlbridge-import" in value):
            continue  # an interpolation (its value is another key's), or the importer's placeholder output_dir
        knobs = (knobs_of or {}).get(key) or ([owners[key]] if key in owners else [])
        if (
            knobs_of is None
            and knobs
            and all(not same(_dump(_value_at(config, k)), _dump(_default_at(k))) for k in knobs)
        ):
            continue  # plan --explain: a knob the config sets itself (the table above shows it), not a silent change
        reason = importer.difference_reason(key, config)
        if reason is None and knobs:
            reason = "follows " + knob_detail(config, knobs)
        out.append(Difference(key, value, view[key], reason or f"rlbridge's {backend.name} adapter sets it"))
    return out


def knob_detail(config: RunConfig, knobs: list[str]) -> str:
    """The knobs that move a native key, those set to other than their default first."""
    values = {k: _dump(_value_at(config, k)) for k in knobs}
    explicit = [k for k in knobs if not same(values[k], _dump(_default_at(k)))]
    shown = explicit or knobs
    return ", ".join(f"{k}={show_value(values[k])}" for k in shown)
