"""`rlbridge import`: an engine recipe -> a canonical config, by inverting the adapter's own translation.

There is no second, hand-written native -> canonical table. The adapter's reader
(adapters/<engine>/importer.py) turns the recipe into native settings, spelled the way the
adapter's plan spells them. Then this module searches the canonical config whose plan reproduces
them: for every canonical knob (walked from the RunConfig schema, so knobs added later are
covered) it probes `backend.plan()` with other values, sees which native keys move, and solves
for the value that reproduces the recipe's (directly, or through the linear relation the probes
show, e.g. TRL's max_steps = steps x updates per step); every candidate is kept only when the
full plan reproduces more of the recipe. What no knob reproduces goes to
`backend_options.<engine>` when the adapter accepts it there, else into the report as
rlbridge-owned (run-directory paths, logging), as needing an rlbridge plugin (reward functions,
agents, hub datasets), or as a conflict, each with the line it came from. Round trip, by
construction and re-checked at the end: plan(import(recipe)) reproduces every setting the report
does not list as owned, needing action or in conflict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlbridge.contract.backend import Backend
from rlbridge.contract.config import RunConfig
from rlbridge.contract.importing import (
    Recipe,
    RecipeAsync,
    RecipeImporter,
    RecipeReward,
    RecipeTelemetry,
    Setting,
    same,
    show_value,
)
from rlbridge.errors import ConfigError, RLBridgeError
from rlbridge.importer.config_schema import (
    _MISSING,
    Leaf,
    _default_at,
    _dump,
    _value_at,
    data_source,
    get_path,
    leaves,
    set_path,
)
from rlbridge.importer.report import KINDS, Difference, Entry, ImportResult

_PLACEHOLDER_REWARD = {"name": "digit_match"}


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
    try:  # every default the engine has (the solver's own list may leave out run bookkeeping such as verl's resume_mode)
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
            reason = "follows " + Solver.knob_detail(config, knobs)
        out.append(Difference(key, value, view[key], reason or f"rlbridge's {backend.name} adapter sets it"))
    return out


class Solver:
    def __init__(
        self,
        backend: Backend,
        importer: RecipeImporter,
        recipe: Recipe,
        explicit_version: bool = False,
        rewards: list[dict[str, Any]] | None = None,
    ):
        self.backend, self.importer, self.recipe = backend, importer, recipe
        self.explicit_version = explicit_version
        self.rewards = rewards
        found = importer.rewards(recipe)
        self.recipe_rewards: list[RecipeReward] = [r for r in found if _valid_reward(r.spec)]
        consumed: dict[tuple[str, int | None], list[RecipeReward]] = {}
        for r in self.recipe_rewards:
            for s in r.settings:
                consumed.setdefault((s.key, s.line), []).append(r)
        self.asynchrony: RecipeAsync | None = importer.asynchrony(recipe)
        for s in self.asynchrony.settings if self.asynchrony else []:
            consumed.setdefault((s.key, s.line), [])  # out of the search: the plan refuses what they are
        self.telemetry: RecipeTelemetry | None = importer.telemetry(recipe)
        logging = {
            (s.key, s.line): (s, kind, detail)
            for s, kind, detail in (self.telemetry or RecipeTelemetry([], [])).settings
        }
        self.async_notes: list[str] = []
        self.reward_settings: list[tuple[Setting, list[RecipeReward]]] = []
        self.unplanned_rewards = False
        self.cache: dict[str, dict[str, Any] | None] = {}
        self.entries: list[Entry] = []
        self.target: dict[str, Any] = {}
        self.lines: dict[str, Setting] = {}
        for s in recipe.settings:
            special = importer.special(s)
            if s.unknown:  # the script computes it when it runs: nothing to import, the report names it and why
                self.entries.append(
                    Entry(
                        s.spelling or s.key,
                        s.value,
                        s.line,
                        "action",
                        f"known only when the script runs: {s.unknown}; set the value in the config",
                    )
                )
            elif (s.key, s.line) in logging:  # a tracker and its names: telemetry.sinks, run_name (not searched)
                shown, kind, detail = logging[(s.key, s.line)]
                self.entries.append(Entry(s.spelling or s.key, shown.value, s.line, kind, detail))
            elif (s.key, s.line) in consumed:
                if consumed[(s.key, s.line)]:
                    self.reward_settings.append((s, consumed[(s.key, s.line)]))
            elif special:
                self.entries.append(Entry(s.spelling or s.key, s.value, s.line, special[0], special[1]))
            elif s.key in self.target and not same(self.target[s.key], s.value):
                first = self.lines[s.key]
                self.entries.append(
                    Entry(
                        s.spelling or s.key,
                        s.value,
                        s.line,
                        "conflict",
                        f"set twice; line {first.line} set {show_value(first.value)}, the later value wins as in the engine",
                    )
                )
                self.target[s.key] = s.value
                self.lines[s.key] = s
            else:
                self.target[s.key] = s.value
                self.lines[s.key] = s
        async_keys = {s.key for s in self.asynchrony.settings} if self.asynchrony else set()
        engine = importer.defaults(recipe)
        self.unset = _unset(engine)
        self.defaults = {
            k: v
            for k, v in engine.items()  # (the async keys are set by the recipe)
            if k not in self.target and k not in async_keys and not importer.special(Setting(k, v))
        }
        self.knob_count: dict[str, int] = {}

    # -- evaluating a candidate config --
    def view(self, data: dict[str, Any]) -> dict[str, Any] | None:
        key = json.dumps(data, sort_keys=True, default=str)
        if key not in self.cache:
            self.cache[key] = self._view(data)
        return self.cache[key]

    def _view(self, data: dict[str, Any]) -> dict[str, Any] | None:
        from rlbridge.run.runner import resolve

        try:
            config = resolve(RunConfig.model_validate(data), copy=False)
            plan = self.backend.plan(config)
            return self.importer.view(plan.native, config)
        except (ValidationError, RLBridgeError, ValueError, TypeError, KeyError, ZeroDivisionError):
            return None

    def score(self, view: dict[str, Any] | None) -> tuple[tuple[int, ...], frozenset[str]]:
        """The recipe's settings reproduced, counted level by level: first those one knob alone moves
        (its direct image, e.g. data.train_batch_size), then those two knobs move, ...: a knob never
        trades its direct image for keys derived from several knobs. And the engine defaults reproduced."""
        if view is None:
            return (-1,) * 7, frozenset(), float("inf")
        hits = [k for k, v in self.target.items() if k in view and same(view[k], v)]
        # a key the plan leaves out keeps the engine's default
        defaults = frozenset(k for k, v in self.defaults.items() if (same(view[k], v) if k in view else True))
        levels = [0] * 6  # settings reproduced, by how many knobs move them: fewest first
        for k in hits:
            levels[min(max(self.knob_count.get(k, 1), 1), 6) - 1] += 1
        # the engine defaults of keys one knob alone moves (TRL's num_iterations=1 is what the recipe
        # implies for algorithm.epochs_per_rollout): right after the recipe's own direct images, so a knob
        # never leaves the recipe's implied value to reproduce a key several knobs move
        direct = sum(1 for k in defaults if self.knob_count.get(k, 0) == 1)
        # how far the numbers not reproduced are (relative): the last tie-break, so a setting no knob value
        # reproduces exactly comes as close as one can (OpenRLHF's max_samples 100000 over batches of 1024: 97 steps)
        distance = sum(
            abs(view[k] - v) / max(abs(v), 1)
            for k, v in self.target.items()
            if _number(v) and _number(view.get(k)) and not same(view[k], v)
        )
        return (levels[0], direct, *levels[1:]), defaults, distance

    @staticmethod
    def better(new: tuple, old: tuple) -> bool:
        """More of the recipe reproduced; or as much, and strictly more engine defaults without losing
        one (a default moves a knob only when nothing the engine did before changes: verl's default
        weight_decay 0.01 is imported, its inert ppo_max_token_len_per_gpu does not turn on token-budget batching);
        or the same of both, and the recipe's other numbers closer (by a tenth at least)."""
        if new[0] != old[0]:
            return new[0] > old[0]
        if new[1] != old[1]:
            return new[1] > old[1]
        return new[2] < old[2] * 0.9

    # -- the search --
    def base(self) -> dict[str, Any]:
        stage = self.recipe.extras.get("stage")
        if stage:  # an offline stage's recipe (e.g. verl's sft_trainer): no reward (docs/stages.md)
            # the reader may start the search where the engine's script does (OpenRLHF's count epochs, not steps)
            return {
                "backend": self.backend.name,
                "engine_version": self.recipe.version,
                "run_name": "run",
                "algorithm": {"name": stage},
                "reward": [],
                "resources": {"gpus_per_node": 1},
                **self.recipe.extras.get("base", {}),
            }
        return {
            "backend": self.backend.name,
            "engine_version": self.recipe.version,
            "run_name": "run",
            "reward": self.rewards or [r.spec for r in self.recipe_rewards] or [_PLACEHOLDER_REWARD],
            "resources": {"gpus_per_node": 1},
            # where the engine's own mode puts the search (OpenRLHF's async flags: max_staleness with split devices,
            # which no single knob move reaches from the colocated start); the plan still has to reproduce it
            **self.recipe.extras.get("base", {}),
        }

    def run(self) -> ImportResult:
        data = self.base()
        if not self.recipe.extras.get("stage") and "base" in self.recipe.extras and self.view(data) is None:
            for key in self.recipe.extras["base"]:  # the reader's start does not plan here: the search starts as usual
                data.pop(key, None)
            data.setdefault("resources", {"gpus_per_node": 1})
        if self.view(data) is None and data["reward"] != [_PLACEHOLDER_REWARD]:
            self.unplanned_rewards = (
                True  # the recipe's rewards do not plan here (e.g. a model path not on this machine)
            )
            data["reward"] = [_PLACEHOLDER_REWARD]
        if self.view(data) is None:
            raise ConfigError(
                f"backend '{self.backend.name}' cannot plan its own default config for {self.recipe.engine} {self.recipe.version}"
            )
        all_leaves = leaves()
        data = self.settle(data, all_leaves)
        for _ in range(2):  # then knobs moved jointly, and coordinate moves again from there
            self.count_knobs(data, all_leaves)
            data, joint = self.solve_joint(data, all_leaves)
            if not joint:
                break
            data = self.settle(data, all_leaves)
        return self.finish(data, all_leaves)

    def settle(self, data: dict[str, Any], all_leaves: list[Leaf]) -> dict[str, Any]:
        """Coordinate moves (one knob at a time) and paired moves, until none improves (4 rounds at most)."""
        for _ in range(4):
            self.count_knobs(data, all_leaves)
            changed = False
            for leaf in all_leaves:
                data, moved = self.solve_leaf(data, leaf)
                changed |= moved
            data, paired = self.solve_pairs(data, all_leaves)
            if not (changed or paired):
                break
        return data

    def count_knobs(self, data: dict[str, Any], all_leaves: list[Leaf]) -> None:
        """How many knobs move each native key (a key one knob alone moves is that knob's direct image)."""
        view = self.view(data)
        counts: dict[str, int] = {}
        for leaf in all_leaves:
            for key in self.influence(data, leaf, view)[0]:
                counts[key] = counts.get(key, 0) + 1
        self.knob_count = counts

    def solve_pairs(self, data: dict[str, Any], all_leaves: list[Leaf]) -> tuple[dict[str, Any], bool]:
        """Coupled knobs: a switch (a Literal or bool knob) whose effect shows only once a knob of its
        section moves too (verl's KL in the reward needs kl_placement: reward and kl_coef together)."""
        view = self.view(data)
        unmatched = [k for k, v in self.target.items() if not (k in view and same(view[k], v))]
        if not unmatched:
            return data, False
        best, best_score, improved = data, self.score(view), False
        best, best_score, improved = self.swap_nullable(best, best_score, unmatched, all_leaves)
        for switch in all_leaves:
            options = list(switch.options or [])
            if not options and switch.kinds and get_path(best, switch.path) is not _MISSING:
                options = [switch.default]  # back to the default, another knob of its section taking over
            if not options or len(options) > 6:
                continue
            section = switch.path.rsplit(".", 1)[0]
            partners = [
                leaf
                for leaf in all_leaves
                if leaf.path.rsplit(".", 1)[0] == section and not leaf.options and leaf.kinds and leaf is not switch
            ]
            for option in options:
                if same(option, get_path(best, switch.path)):
                    continue
                trial = set_path(best, switch.path, option)
                if self.view(trial) is None:
                    continue
                for leaf in partners:
                    trial, _ = self.solve_leaf(trial, leaf)
                trial_score = self.score(self.view(trial))
                if self.better(trial_score, best_score):
                    best, best_score, improved = trial, trial_score, True
        return best, improved

    def swap_nullable(
        self, data: dict[str, Any], score: tuple, unmatched: list[str], all_leaves: list[Leaf]
    ) -> tuple[dict[str, Any], tuple, bool]:
        """A numeric knob cleared while another of its section, unset, takes one of the unreproduced settings' values
        (OpenRLHF's --train.num_episodes 100 is training.epochs 100 with training.steps null: the two may not be
        set together there, so neither single move plans)."""
        values = [self.target[k] for k in unmatched]
        values = [v for v in dict.fromkeys(v for v in values if isinstance(v, int) and not isinstance(v, bool))][:20]
        best, best_score, improved = data, score, False
        for knob in all_leaves:
            if not (knob.kinds and knob.nullable) or get_path(data, knob.path) in (None, _MISSING):
                continue
            section = knob.path.rsplit(".", 1)[0]
            for other in all_leaves:
                if other is knob or other.path.rsplit(".", 1)[0] != section or not (other.kinds & {int}):
                    continue
                if not other.nullable or get_path(data, other.path) not in (None, _MISSING):
                    continue
                for value in values:
                    trial = set_path(set_path(data, knob.path, None), other.path, value)
                    trials = [trial]
                    if (
                        self.view(trial) is None
                    ):  # a knob of the section that needs the cleared one, back to its default
                        trials = [
                            set_path(trial, leaf.path, leaf.default)
                            for leaf in all_leaves
                            if leaf.path.rsplit(".", 1)[0] == section
                            and leaf not in (knob, other)
                            and get_path(trial, leaf.path) not in (_MISSING, leaf.default)
                        ]
                    for candidate in trials:
                        trial_score = self.score(self.view(candidate))
                        if self.better(trial_score, best_score):
                            best, best_score, improved = candidate, trial_score, True
        return best, best_score, improved

    def solve_joint(self, data: dict[str, Any], all_leaves: list[Leaf]) -> tuple[dict[str, Any], bool]:
        """Numeric knobs moved together, for a recipe setting no single move reproduces: each candidate
        of one knob that moves the setting, then the other knobs that move it solved after it (TRL's
        gradient_accumulation_steps = mini / micro needs training.batch_size and micro_batch_size at once)."""
        view = self.view(data)
        unmatched = {k for k, v in self.target.items() if not (k in view and same(view[k], v))}
        if not unmatched:
            return data, False
        numeric = [(leaf, *self.influence(data, leaf, view)) for leaf in all_leaves if leaf.kinds & {int, float}]
        # the knobs that move an unmatched setting, and the knobs that share a setting with them (the
        # micro batch moves gradient_accumulation_steps; batch_size moves per_device_train_batch_size with it)
        movers = [m for m in numeric if m[1] & unmatched]
        shared = set().union(*(m[1] for m in movers)) if movers else set()
        partners = [m for m in numeric if m[1] & shared]
        best, best_score, improved = data, self.score(view), False
        for leaf, moved, probes in partners:
            for value in self.candidates(data, leaf, moved, probes, view)[:12]:
                trial = set_path(data, leaf.path, value)
                if self.view(trial) is None:
                    continue
                for other, _, _ in movers + partners:
                    if other is not leaf:
                        trial, _ = self.solve_leaf(trial, other)
                trial_score = self.score(self.view(trial))
                if self.better(trial_score, best_score):
                    best, best_score, improved = trial, trial_score, True
        return best, improved

    def influence(
        self, data: dict[str, Any], leaf: Leaf, view: dict[str, Any]
    ) -> tuple[set[str], list[tuple[Any, dict[str, Any]]]]:
        """Native keys that move when the knob moves, and the probes (value, view)."""
        current = get_path(data, leaf.path)
        probes: list[Any] = []
        if leaf.options:
            probes += [o for o in leaf.options if o != current]
        if leaf.source:
            probes += [
                {"type": "jsonl", "path": "/rlbridge-probe/a.jsonl"},
                {"type": "parquet", "path": "/rlbridge-probe/b.parquet"},
                {"type": "hf", "name": "rlbridge-probe/c", "split": "probe"},
            ]
        elif str in leaf.kinds:
            probes += ["rlbridge-probe-a", "/rlbridge-probe/b"]
        numeric = leaf.kinds & {int, float}
        if numeric:
            probes += self.numeric_pool(data, leaf, current)
        if leaf.nullable and current is not None:
            probes.append(None)
        seen: list[tuple[Any, dict[str, Any]]] = []
        moved: set[str] = set()
        keys = set(self.target) | set(self.defaults)
        valid_numeric = 0
        for value in probes:
            if numeric and isinstance(value, (int, float)) and not isinstance(value, bool) and valid_numeric >= 3:
                continue
            probe_view = self.view(set_path(data, leaf.path, value))
            if probe_view is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                valid_numeric += 1
            seen.append((value, probe_view))
            for k in keys:
                if not same(probe_view.get(k, _MISSING), view.get(k, _MISSING)):
                    moved.add(k)
        return moved, seen

    def numeric_pool(self, data: dict[str, Any], leaf: Leaf, current: Any) -> list[Any]:
        group = get_path(data, "algorithm.group_size")
        group = group if isinstance(group, int) else 8
        base = [1, 2, 3, 4, 8, 16, 5, 10, 32, 64, 128]
        pool = base + [b * group for b in base]
        if float in leaf.kinds and int not in leaf.kinds:
            pool = [0.5, 0.25, 0.1, 0.9, 0.01, 2.0, 3.0]
        if isinstance(current, (int, float)) and not isinstance(current, bool):
            pool = [current * 2, current + 1] + pool if current else pool
        out = []
        for p in pool:
            if p != current and p not in out:
                out.append(p)
        return out

    def candidates(
        self,
        data: dict[str, Any],
        leaf: Leaf,
        moved: set[str],
        probes: list[tuple[Any, dict[str, Any]]],
        view: dict[str, Any],
    ) -> list[Any]:
        current = get_path(data, leaf.path)
        out: list[Any] = list(leaf.options or [])
        if leaf.nullable:
            out.append(None)
        if leaf.default in (leaf.options or []) or type(leaf.default) in leaf.kinds or (leaf.source and leaf.default):
            out.append(leaf.default)
        points = (
            [(current, view)] + probes
            if isinstance(current, (int, float)) and not isinstance(current, bool)
            else probes
        )
        numeric_points = [(v, pv) for v, pv in points if isinstance(v, (int, float)) and not isinstance(v, bool)]
        for key in sorted(moved):
            target = self.target.get(key, self.defaults.get(key, _MISSING))
            if target is _MISSING:
                continue
            if leaf.source and isinstance(target, list) and target and all(isinstance(t, str) for t in target):
                out.append(data_source(list(target)))  # several files (verl's data.train_files=[a, b])
            parts = list(enumerate(target)) if isinstance(target, (list, tuple)) else [(None, target)]
            for index, x in parts:
                if leaf.source and isinstance(x, str):
                    named = self.importer.data_source(key, x, self.recipe)
                    out.append(named or data_source(x))
                if isinstance(x, str) and str in leaf.kinds:
                    out.append(x)
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    continue
                if leaf.kinds & {int, float}:
                    out.append(x)
                    out += self.linear(numeric_points, key, index, x, leaf)
        # keep order, drop repeats and the current value
        unique: list[Any] = []
        for c in out:
            if not same(c, current) and not any(same(c, u) for u in unique):
                unique.append(c)
        return unique

    @staticmethod
    def linear(
        points: list[tuple[Any, dict[str, Any]]], key: str, index: int | None, x: float, leaf: Leaf
    ) -> list[Any]:
        """The knob value that gives native value x, if the probes show a linear relation."""
        samples = []
        for v, pv in points:
            y = pv.get(key)
            if index is not None:
                y = y[index] if isinstance(y, (list, tuple)) and len(y) > index else None
            if isinstance(y, (int, float)) and not isinstance(y, bool):
                samples.append((float(v), float(y)))
        out: list[Any] = []
        for i in range(len(samples)):
            for j in range(i + 1, len(samples)):
                (v0, y0), (v1, y1) = samples[i], samples[j]
                if v0 == v1 or y0 == y1:
                    continue
                v = v0 + (x - y0) * (v1 - v0) / (y1 - y0)
                if int in leaf.kinds and float not in leaf.kinds:
                    import math

                    out += [round(v)] if abs(v - round(v)) < 1e-6 else [math.floor(v), math.ceil(v)]
                else:
                    out.append(v)
        return out

    def solve_leaf(self, data: dict[str, Any], leaf: Leaf) -> tuple[dict[str, Any], bool]:
        view = self.view(data)
        assert view is not None
        moved, probes = self.influence(data, leaf, view)
        if not moved:
            return data, False
        best, best_score, moved_any = data, self.score(view), False
        for value in self.candidates(data, leaf, moved, probes, view):
            candidate = set_path(data, leaf.path, value)
            s = self.score(self.view(candidate))
            if self.better(s, best_score):
                best, best_score, moved_any = candidate, s, True
        return best, moved_any

    # -- classification and the round-trip check --
    def finish(self, data: dict[str, Any], all_leaves: list[Leaf]) -> ImportResult:
        view = self.view(data)
        assert view is not None
        influence = {leaf.path: self.influence(data, leaf, view)[0] for leaf in all_leaves}
        config = RunConfig.model_validate(data)
        knobs_of: dict[str, list[str]] = {}
        for path, keys in influence.items():
            for k in keys:
                knobs_of.setdefault(k, []).append(path)
        options: dict[str, Any] = {}
        pending: list[tuple[str, Setting]] = []
        owners = self.backend.owned_native_keys()
        for key, setting in self.lines.items():
            x = self.target[key]
            if key in view and same(view[key], x) or key not in view and same(self.unset.get(key, _MISSING), x):
                knobs = knobs_of.get(key, [])
                if (
                    not knobs
                    and key in owners
                    and not same(_dump(_value_at(config, owners[key])), _dump(_default_at(owners[key])))
                ):
                    # no probe moved it (a switch only the knob's default turns off: --train.async_enable from
                    # max_staleness 1), but the capability table names the knob that writes it, and that knob is set
                    knobs = [owners[key]]
                if knobs:
                    detail = self.knob_detail(config, knobs)
                    self.entries.append(Entry(setting.spelling or key, x, setting.line, "mapped", detail))
                else:
                    self.entries.append(
                        Entry(setting.spelling or key, x, setting.line, "same", "no canonical knob needed")
                    )
                continue
            pending.append((key, setting))
        for key, setting in pending:
            x = self.target[key]
            opt_key, opt_value = self.importer.option(setting)
            trial = set_path(data, "backend_options", {self.backend.name: {**options, opt_key: opt_value}})
            trial_view = self.view(trial)
            if (
                trial_view is not None
                and key in trial_view
                and same(trial_view[key], x)
                and self.score(trial_view)[0] >= self.score(view)[0]
            ):
                options[opt_key] = opt_value
                view = trial_view
                self.entries.append(
                    Entry(
                        setting.spelling or key,
                        x,
                        setting.line,
                        "option",
                        f"backend_options.{self.backend.name}.{opt_key}",
                    )
                )
                continue
            knobs = knobs_of.get(key, [])
            planned = view.get(key, _MISSING)
            why = "the plan has " + ("no such key" if planned is _MISSING else show_value(planned))
            if knobs:
                why += " (from " + self.knob_detail(config, knobs) + ")"
            refused = self.refusal(data, opt_key, opt_value)
            if refused:
                why += f"; backend_options refuses it: {refused}"
                owner = self.backend.owned_native_keys().get(key)
                owner_refused = self.knob_refusal(data, owner, x) if owner else None
                if owner_refused:  # the advice would be refused too: say so, with the reason, not a dead end
                    why += f"; {owner}={show_value(x)} is refused too: {owner_refused}"
            within = self.recipe_conflict(data, key, x, all_leaves)
            if within:
                why = within + "; " + why
            self.entries.append(Entry(setting.spelling or key, x, setting.line, "conflict", why))
        if options:
            data = set_path(data, "backend_options", {self.backend.name: options})
        final_view = self.view(data)
        assert final_view is not None
        # a key the plan leaves out is the engine's own default: what the engine runs with
        final_view = {**self.unset, **final_view}
        # the round trip, re-checked: every mapped / same / option setting is in the final plan
        for e in self.entries:
            if e.kind in ("mapped", "same", "option"):
                key = self._key_of(e)
                if not (key in final_view and same(final_view[key], self.target[key])):
                    e.kind, e.detail = "conflict", f"the final plan has {show_value(final_view.get(key))}"
        self.classify_rewards(final_view)
        order = {s.line or 0: i for i, s in enumerate(self.recipe.settings)}
        self.entries.sort(key=lambda e: (list(KINDS).index(e.kind), order.get(e.line or 0, 0)))
        matched = sum(1 for k, v in self.defaults.items() if k in final_view and same(final_view[k], v))
        defaults_seen = sum(1 for k in self.defaults if k in final_view)  # keys the plan leaves out keep the default
        final_config = resolve_config(data)
        differences = default_differences(
            self.backend,
            final_config,
            self.backend.plan(final_config).native,
            skip=set(self.target)
            | {s.key for s, _ in self.reward_settings}
            | {s.key for s in (self.asynchrony.settings if self.asynchrony else [])},
            knobs_of=knobs_of,
            recipe=self.recipe,
        )
        data = self.classify_async(data)  # after the differences: the plan may refuse the async knobs here (verl)
        return ImportResult(
            self.output(data), self.entries, self.recipe, self.output_notes(data), (matched, defaults_seen), differences
        )

    def classify_async(self, data: dict[str, Any]) -> dict[str, Any]:
        """The async settings (RecipeAsync): the config with their knobs and options, and each setting mapped
        (or kept as an option) when the adapter's translation of that config reproduces it, else a conflict."""
        found = self.asynchrony
        if found is None:
            return data
        trial = data
        for path, value in found.knobs.items():
            trial = set_path(trial, path, value)
        if found.options:
            trial = set_path(
                trial,
                "backend_options",
                {self.backend.name: {**trial.get("backend_options", {}).get(self.backend.name, {}), **found.options}},
            )
        try:
            native = found.native(RunConfig.model_validate(trial))
        except ValidationError as exc:
            errors = exc.errors()
            native, failed = {}, (errors[0]["msg"] if errors else str(exc).splitlines()[0])
        except (RLBridgeError, ValueError) as exc:
            native, failed = {}, str(exc).splitlines()[0]
        else:
            failed = ""
            for path, value in found.knobs.items():  # a knob the search had solved (verl: the trainer's devices)
                before = get_path(data, path)
                if before is not _MISSING and not same(before, value):
                    self.async_notes.append(
                        f"{path}: the other settings were solved with {show_value(before)}; the config has "
                        f"{show_value(value)}, the async launch's (the report's details above show the former)"
                    )
            data = trial  # a config that does not load is not written: its settings are conflicts, each saying why
        for s in found.settings:
            detail = found.details.get(s.key, "")
            if s.key in native and same(native[s.key], s.value):
                # an option that also sets a knob (verl's staleness fraction: max_staleness, and kept) is mapped
                kind = "option" if s.key in found.options and not any(k in detail for k in found.knobs) else "mapped"
            else:
                kind = "conflict"
                detail = (f"{detail}; " if detail else "") + (
                    f"the async knobs do not load: {failed}"
                    if failed
                    else f"the async translation has {show_value(native.get(s.key))}"
                )
            self.entries.append(Entry(s.spelling or s.key, s.value, s.line, kind, detail))
        return data

    def recipe_conflict(self, data: dict[str, Any], key: str, x: Any, all_leaves: list[Leaf]) -> str | None:
        """Why a setting is in conflict with the recipe itself, found by the plan: the knob that owns the
        native key (the adapter's capability table) is set to reproduce it, a knob it is exclusive with
        cleared where the config says so, and the recipe settings that then stop being reproduced are
        named with their lines. None when no such value is found (then the conflict is a mapping gap)."""
        owner = self.backend.owned_native_keys().get(key)
        leaf = next((leaf for leaf in all_leaves if leaf.path == owner), None)
        view = self.view(data)
        if leaf is None or view is None:
            return None
        moved, probes = self.influence(data, leaf, view)
        values = self.candidates(data, leaf, moved | {key}, probes, view)
        if not isinstance(x, bool) and type(x) in leaf.kinds and not any(same(x, v) for v in values):
            values.insert(0, x)
        cleared = [
            other.path
            for other in all_leaves
            if other.nullable and other is not leaf and get_path(data, other.path) not in (None, _MISSING)
        ]
        for value in values:
            trial = set_path(data, leaf.path, value)
            trials = [(trial, "")] + [(set_path(trial, path, None), f" and {path}=null") for path in cleared]
            for candidate, extra in trials:
                trial_view = self.view(candidate)
                if trial_view is None or key not in trial_view or not same(trial_view[key], x):
                    continue
                lost = [
                    (k, s)
                    for k, s in self.lines.items()
                    if k != key
                    and k in view
                    and same(view[k], self.target[k])
                    and not (k in trial_view and same(trial_view[k], self.target[k]))
                ]
                if not lost:
                    continue
                shown = "; ".join(
                    f"line {s.line} {s.spelling or k}={show_value(self.target[k])} (would become "
                    f"{show_value(trial_view.get(k, None)) if k in trial_view else 'unset'})"
                    for k, s in lost[:3]
                )
                return (
                    f"conflicts with the recipe's own line {', '.join(str(s.line) for _, s in lost[:3])}: {leaf.path}={show_value(value)}{extra} "
                    f"reproduces it, but then the plan no longer reproduces {shown}; the import keeps those"
                )
        return None

    def classify_rewards(self, view: dict[str, Any]) -> None:
        """The recipe's reward settings: mapped when the plan reproduces them (OpenRLHF's own reward-model
        flag), else 'reward' (rlbridge scores them itself); 'action' when --reward replaced them."""
        for setting, rewards in self.reward_settings:
            shown = ", ".join(f"reward[{self.recipe_rewards.index(r)}]={show_value(r.spec)}" for r in rewards)
            key, x = setting.key, setting.value
            if self.rewards:
                kind, detail = "action", f"--reward replaced the recipe's own reward ({shown})"
            elif key in view and same(view[key], x):
                kind, detail = "mapped", shown
            else:
                kind, detail = "reward", shown
            self.entries.append(Entry(setting.spelling or key, x, setting.line, kind, detail))

    @staticmethod
    def knob_detail(config: RunConfig, knobs: list[str]) -> str:
        """The knobs that move a native key, those set to other than their default first."""
        values = {k: _dump(_value_at(config, k)) for k in knobs}
        explicit = [k for k in knobs if not same(values[k], _dump(_default_at(k)))]
        shown = explicit or knobs
        return ", ".join(f"{k}={show_value(values[k])}" for k in shown)

    def _key_of(self, entry: Entry) -> str:
        for key, s in self.lines.items():
            if (s.spelling or key) == entry.key and s.line == entry.line:
                return key
        return entry.key

    def knob_refusal(self, data: dict[str, Any], path: str, value: Any) -> str | None:
        """Why the plan refuses the canonical knob `path` at `value` (None: it plans)."""
        from rlbridge.run.runner import resolve

        try:
            self.backend.plan(resolve(RunConfig.model_validate(set_path(data, path, value))))
        except RLBridgeError as exc:
            return str(exc)
        except ValidationError as exc:  # the validator's own message, not pydantic's "1 validation error for RunConfig"
            errors = exc.errors()
            return errors[0]["msg"].removeprefix("Value error, ") if errors else str(exc).splitlines()[0]
        except (ValueError, TypeError) as exc:
            return str(exc).splitlines()[0]
        return None

    def refusal(self, data: dict[str, Any], key: str, value: Any) -> str | None:
        from rlbridge.run.runner import resolve

        try:
            config = resolve(
                RunConfig.model_validate(set_path(data, "backend_options", {self.backend.name: {key: value}}))
            )
            self.backend.plan(config)
        except RLBridgeError as exc:
            return str(exc)
        except (ValidationError, ValueError, TypeError) as exc:
            return str(exc).splitlines()[0]
        return None

    def output(self, data: dict[str, Any]) -> dict[str, Any]:
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
        if not self.explicit_version:
            out.pop("engine_version", None)
        out["reward"] = self.rewards or [r.spec for r in self.recipe_rewards]
        if self.telemetry and self.telemetry.sinks:
            out["telemetry"] = {**out.get("telemetry", {}), "sinks": self.telemetry.sinks}
        if self.telemetry and self.telemetry.run_name:
            out["run_name"] = self.telemetry.run_name
        if self.telemetry and self.telemetry.samples_per_step is not None:
            out["telemetry"] = {**out.get("telemetry", {}), "samples_per_step": self.telemetry.samples_per_step}
        ordered = {"backend": self.backend.name}
        ordered.update({k: v for k, v in out.items() if k != "backend"})
        return ordered

    def output_notes(self, data: dict[str, Any]) -> list[str]:
        notes = ([self.asynchrony.note] if self.asynchrony and self.asynchrony.note else []) + self.async_notes
        if self.unplanned_rewards:
            notes.append(
                "reward: the recipe's own rewards do not plan on this machine (is the model path there?); "
                "the settings were solved with a placeholder reward"
            )
        files = [] if self.rewards else [r.spec.get("function", "").rpartition(":")[0] for r in self.recipe_rewards]
        files = [f for f in files if f.endswith(".py")]
        missing = [f for f in files if Path(f).is_absolute() and not Path(f).is_file()]
        if missing:
            notes.append(
                f"reward: {missing[0]} is not on this machine; the config plans where it is (or give --reward)"
            )
        if any(not Path(f).is_absolute() for f in files):
            notes.append(
                "reward: a reward function file's path is as the recipe wrote it (relative to where the recipe was "
                "launched); rlbridge reads FILE.py relative to the config file, so check it there"
            )
        elif (
            not self.rewards
            and (default := self.importer.default_reward) is not None
            and any(r.spec == default.spec for r in self.recipe_rewards)
        ):
            notes.append(default.note)
        elif not self.rewards and not self.recipe_rewards and not self.recipe.extras.get("stage"):
            notes.append(
                "reward: the config has none yet; rlbridge rewards are plugins (`rlbridge plugins`): "
                "add one with --reward NAME or edit reward:, see the 'action' settings above"
            )
        if not self.explicit_version:
            notes.append(
                f"engine_version is not written: the plan above was made for {self.recipe.engine} {self.recipe.version}, "
                f"and the config plans for whichever {self.recipe.engine} version runs it (--engine-version pins it)"
            )
        if "train" not in data.get("data", {}):
            notes.append(
                "data.train: the recipe names no training data rlbridge can read; the config keeps rlbridge's default generator"
            )
        return notes


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _unset(defaults: dict[str, Any]) -> dict[str, Any]:
    """What the engine runs with for each key a plan leaves out: its own default (an interpolation of another key
    left out: its value is that key's)."""
    return {k: v for k, v in defaults.items() if not (isinstance(v, str) and "${" in v)}


def recipe_view(backend: Backend, config: RunConfig, recipe: Recipe) -> dict[str, Any]:
    """The plan of `config` as the recipe's keys, with the engine's own default for each key the plan leaves out
    (what the engine runs with): the view the import's round trip compares the recipe with."""
    importer = backend.recipe_importer()
    return {**_unset(importer.defaults(recipe)), **importer.view(backend.plan(config).native, config)}


def resolve_config(data: dict[str, Any]) -> RunConfig:
    from rlbridge.run.runner import resolve

    return resolve(RunConfig.model_validate(data))


def _valid_reward(spec: dict[str, Any]) -> bool:
    from rlbridge.contract.config import RewardSpec

    try:
        RewardSpec.model_validate(spec)
        return True
    except ValidationError:
        return False
