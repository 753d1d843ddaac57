"""The importer's contract: what an adapter's recipe importer (adapters/<engine>/importer.py, returned by
`Backend.recipe_importer()`) provides for `rlbridge import` (RecipeImporter, with a default for every optional
part), and the data types it reads and returns: a recipe's settings (Recipe, Setting, Token, ShellCommand), the
rewards, telemetry and asynchronous launch it declares, the secrets it passes on its command line. The importer
room (rlbridge.importer) solves what the adapter reads into a canonical config."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rlbridge.contract.config import RunConfig


@dataclass
class Setting:
    """One native setting of a recipe: the engine's key (normalised spelling), its value, and where it came from."""

    key: str
    value: Any
    line: int | None = None
    text: str = ""
    """The setting as written (e.g. `actor_rollout_ref.actor.optim.lr=1e-6`)."""
    spelling: str = ""
    """The key as written, when the importer normalised it (e.g. a `+` prefix, a flat OpenRLHF flag)."""
    unknown: str = ""
    """Why the value cannot be known without running the script (e.g. a `$(...)` the reader does not run):
    the value is then the text as written, and the importer reports the setting instead of importing it."""


@dataclass
class Recipe:
    """What an adapter's reader found in a recipe."""

    engine: str
    source: str
    version: str
    settings: list[Setting]
    notes: list[tuple[int | None, str]] = field(default_factory=list)
    """Things the reader could not take literally (unresolved variables, extra arguments), with lines."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Reader-specific facts (e.g. the TRL config class of a Python file)."""

    def where(self, line: int | None) -> str:
        return f"{self.source}:{line}" if line else self.source


@dataclass
class Token:
    text: str
    line: int
    unknown: str = ""
    """Why the word's value is unknown without running the script ('' when it is known)."""


@dataclass
class ShellCommand:
    """A command found in a shell script: its words (with the line of each) after the marker word."""

    words: list[Token]
    args: list[Token]
    line: int
    variables: dict[str, str]
    notes: list[tuple[int | None, str]]


def scalar(text: str) -> Any:
    """A command-line value as a number when it is one, else the string."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


_EXACT = (str, int, float, bool, type(None))  # types whose equal values are `same` whatever the rules below say


def same(a: Any, b: Any) -> bool:
    """Native values compared as the engine would read them (1 == 1.0, (a, b) == [a, b])."""
    kind = type(a)
    # the fast paths: the importer's search compares millions of equal scalars and shared objects
    if kind is type(b) and kind in _EXACT and a == b:
        return True
    if a is b and kind not in _EXACT:  # one object (a float is compared by value: NaN is not same as itself)
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str) and a != b and ("/" in a or "/" in b):
        return os.path.normpath(os.path.expanduser(a)) == os.path.normpath(os.path.expanduser(b))
    return a == b


def listed_special(key: str, owned: dict[str, str], action: dict[str, str]) -> tuple[str, str] | None:
    """("owned" or "action", reason) for a recipe key an importer's tables name, exactly or by a prefix that ends
    in '.' (`owned` first); None when neither does. For RecipeImporter.special()."""
    for table, kind in ((owned, "owned"), (action, "action")):
        for prefix, reason in table.items():
            if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
                return kind, reason
    return None


def run_dir_special(setting: Setting) -> tuple[str, str] | None:
    """A setting whose value is a path under the plan's <run_dir> is rlbridge's own (RecipeImporter.special())."""
    if isinstance(setting.value, str) and "<run_dir>" in setting.value:
        return "owned", "a path inside rlbridge's run directory"
    return None


def show_value(value: Any) -> str:
    """A native value as the import report shows it (JSON for lists, dicts and None; None entries left out)."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v not in (None, {}, [])}
    if isinstance(value, (list, dict)) or value is None:
        return json.dumps(
            value,
            default=lambda o: o.model_dump(mode="json", exclude_defaults=True) if isinstance(o, BaseModel) else str(o),
        )
    return str(value)


class RecipeSource(ABC):
    """A recipe as `rlbridge import` was given it (a file, or a command line), handed to `RecipeImporter.read` by
    the importer room, which implements the readers (nothing from the recipe is ever run)."""

    argument: str
    """The recipe as given: a file's path, or a command line."""
    path: Path
    """The argument as a path (a command line's is no file)."""
    is_file: bool
    """Whether the argument names a file (else it is a command line)."""
    text: str
    """The file's text, or the command line itself."""
    name: str
    """Where settings come from, as reports and errors name it: the file's path, or '<command line>'."""

    @abstractmethod
    def command(self, markers: tuple[str, ...], what: str) -> ShellCommand:
        """The first command in the recipe (a launch script or a command line) with a word in `markers` (a program,
        a module, a script's name): the words bash would pass it, each with its line, read statically. A script is
        read as bash runs it from its own directory. Raise ConfigError naming `what` when there is none."""

    @abstractmethod
    def mapping(self, path: Path | None = None) -> tuple[Any, dict[str, int]]:
        """A YAML or JSON file (default: the recipe itself; else one it names) and the line of each top-level and
        nested, dotted, key. Raise ConfigError (file and line) for a syntax error."""


class RecipeImporter(ABC):
    """What an adapter provides for `rlbridge import` (returned by `Backend.recipe_importer()`): read, view,
    special, option and defaults; every other part has a default here (the engine declares nothing of it)."""

    engine: str
    default_version: str
    default_reward: RecipeReward | None = None
    """The engine's built-in scorer, which scores a recipe that names no reward of its own: `rewards()` returns it
    for such a recipe and the report gives its note. None: the engine has none (the config gets --reward's)."""

    @abstractmethod
    def read(self, source: RecipeSource, version: str | None) -> Recipe:
        """The recipe's native settings, keys spelled as `view` spells them. Raise ConfigError (one
        line, with the source line) for a recipe without a launch command or with unknown keys."""

    @abstractmethod
    def view(self, native: dict[str, Any], config: RunConfig) -> dict[str, Any]:
        """A plan's native configuration as the flat settings a recipe would write (placeholders such
        as <model_dir> replaced by the config's own paths)."""

    @abstractmethod
    def special(self, setting: Setting) -> tuple[str, str] | None:
        """('owned' | 'action', reason) for a setting rlbridge sets itself or cannot import; else None."""

    @abstractmethod
    def option(self, setting: Setting) -> tuple[str, Any]:
        """The backend_options key and value that pass this setting through."""

    @abstractmethod
    def defaults(self, recipe: Recipe) -> dict[str, Any]:
        """The engine's effective values of the keys the recipe leaves unset (empty when unknown)."""

    def engine_defaults(self, recipe: Recipe) -> dict[str, Any]:
        """Every default the engine has (what the report compares the plan with); default: `defaults`, which may
        leave out run bookkeeping the solver must not search."""
        return self.defaults(recipe)

    def difference_reason(self, key: str, config: RunConfig) -> str | None:
        """Why the plan sets `key` to other than the engine's default; default None: the knob that sets it says why."""
        return None

    def rewards(self, recipe: Recipe) -> list[RecipeReward]:
        """The canonical reward entries the recipe's own rewards are (a reward model: {model: PATH}; a
        reward function file: {native: ENGINE, function: FILE.py:NAME}), each with the settings it
        consumes. Default: none, rewards are left to --reward."""
        return []

    def telemetry(self, recipe: Recipe) -> RecipeTelemetry | None:
        """The recipe's trackers and run name as canonical telemetry (e.g. a tracker flag and its project).
        Default None: logging settings are left to special()."""
        return None

    def asynchrony(self, recipe: Recipe) -> RecipeAsync | None:
        """The recipe's asynchronous launch (an engine's separate async entry point) as canonical knobs.
        Default None: the recipe is read as a synchronous launch."""
        return None

    def data_source(self, key: str, value: Any, recipe: Recipe) -> dict[str, Any] | None:
        """The canonical data source (DataSource fields) the recipe's setting `key` names, with what the recipe's
        other settings say of it (a hub dataset's split). Default None: the file rule (data_source(), by suffix)."""
        return None


@dataclass
class RecipeReward:
    spec: dict[str, Any]
    """A canonical reward entry (RewardSpec fields)."""
    settings: list[Setting]
    """The recipe settings this entry stands for (they leave the solver's targets)."""
    note: str = ""
    """What the import report notes of this entry (e.g. where the engine's built-in scorer can run)."""


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
