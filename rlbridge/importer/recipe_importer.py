"""What an adapter's recipe importer (adapters/<engine>/importer.py, returned by `Backend.recipe_importer()`)
provides for `rlbridge import`, and the data types it returns: the rewards, telemetry and asynchronous launch
a recipe declares, the secrets it passes on its command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rlbridge.contract.config import RunConfig
from rlbridge.importer.recipe import Recipe, Setting


class RecipeImporter(Protocol):
    """What an adapter provides for `rlbridge import` (returned by `Backend.recipe_importer()`)."""

    engine: str
    default_version: str

    def read(self, source: str, version: str | None) -> Recipe:
        """The recipe's native settings, keys spelled as `view` spells them. Raise ConfigError (one
        line, with the source line) for a recipe without a launch command or with unknown keys."""

    def view(self, native: dict[str, Any], config: RunConfig) -> dict[str, Any]:
        """A plan's native configuration as the flat settings a recipe would write (placeholders such
        as <model_dir> replaced by the config's own paths)."""

    def special(self, setting: Setting) -> tuple[str, str] | None:
        """('owned' | 'action', reason) for a setting rlbridge sets itself or cannot import; else None."""

    def option(self, setting: Setting) -> tuple[str, Any]:
        """The backend_options key and value that pass this setting through."""

    def defaults(self, recipe: Recipe) -> dict[str, Any]:
        """The engine's effective values of the keys the recipe leaves unset (empty when unknown)."""

    def rewards(self, recipe: Recipe) -> list[RecipeReward]:
        """The canonical reward entries the recipe's own rewards are (a reward model: {model: PATH}; a
        reward function file: {native: ENGINE, function: FILE.py:NAME}), each with the settings it
        consumes. Optional: an importer without it leaves rewards to --reward."""

    def telemetry(self, recipe: Recipe) -> RecipeTelemetry | None:
        """The recipe's trackers and run name as canonical telemetry (verl's trainer.logger, OpenRLHF's
        --logger.wandb.*, TRL's report_to). Optional: an importer without it leaves logging settings to special()."""

    def data_source(self, key: str, value: Any, recipe: Recipe) -> dict[str, Any] | None:
        """The canonical data source (DataSource fields) the recipe's setting `key` names, with what the recipe's
        other settings say of it (a hub dataset's split); None: the file rule (data_source(), by suffix). Optional."""


@dataclass
class RecipeReward:
    spec: dict[str, Any]
    """A canonical reward entry (RewardSpec fields)."""
    settings: list[Setting]
    """The recipe settings this entry stands for (they leave the solver's targets)."""


@dataclass
class RecipeTelemetry:
    """What a recipe's logging settings become (returned by an importer's optional `telemetry(recipe)`)."""

    sinks: list[dict[str, Any]]
    """telemetry.sinks entries (TelemetrySink fields): the trackers the recipe logs to, with its project names."""
    settings: list[tuple[Setting, str, str]]
    """Each logging setting consumed, with its report kind ('sink'; 'action' for a tracker rlbridge has no sink
    for) and how it maps. A secret's Setting carries SECRET as its value: the report never shows it."""
    run_name: str | None = None
    """The run's name the recipe gives its tracker (the config's run_name), if it gives one."""
    samples_per_step: int | None = None
    """The sampled completions the recipe logs per step (telemetry.samples_per_step), if it says."""


SECRET = "<not imported>"
"""The value the report shows for an API key the recipe passes on its command line."""
SECRET_DETAIL = (
    "an API key: never written into the config; the W&B sink reads it from WANDB_API_KEY in the environment the "
    "run starts from (or `wandb login`)"
)
TRACKERS = ("wandb", "tensorboard", "mlflow")
"""The engines' trackers that rlbridge has a telemetry sink of the same name for (plugins/telemetry.py)."""


def tracker_sink(
    tracker: str,
    project: str | None = None,
    entity: str | None = None,
    group: str | None = None,
    log_dir: str | None = None,
) -> dict[str, Any] | None:
    """The telemetry.sinks entry of an engine's tracker (None: rlbridge has no sink for it). W&B logs online, as
    the engine's run would; its project, entity and group are the recipe's."""
    if tracker not in TRACKERS:
        return None
    args = {
        "wandb": {"mode": "online", "project": project, "entity": entity, "group": group},
        "tensorboard": {"log_dir": log_dir},
        "mlflow": {"experiment": project},
    }[tracker]
    args = {k: v for k, v in args.items() if v is not None}
    return {"name": tracker, **({"args": args} if args else {})}


@dataclass
class RecipeAsync:
    """An asynchronous launch (verl's async trainers: separate entry points with settings main_ppo's search
    cannot solve), returned by an importer's optional `asynchrony(recipe)`.
    The solver leaves its settings out of the search, writes `knobs` and `options` into the config, and
    checks the round trip setting by setting with the adapter's own translation of those knobs (`native`)."""

    knobs: dict[str, Any]
    """Canonical values, by dotted path (rollout.max_staleness, placement.policy, ...)."""
    options: dict[str, Any]
    """backend_options.<engine> entries: native async settings with no canonical knob, passed through."""
    settings: list[Setting]
    """The recipe settings these stand for (they leave the solver's targets)."""
    details: dict[str, str]
    """Setting key -> how it maps (an approximation says how)."""
    native: Any
    """Callable(RunConfig) -> {native key: value}: the adapter's translation of the async knobs (the round trip)."""
    note: str = ""
    """Why the written config's plan is refused (the backend's own reason), if it is."""
