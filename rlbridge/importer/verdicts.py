"""The verdicts of `rlbridge import` on the recipe's settings the search (rlbridge.importer.solver) left: each one
mapped to the canonical knobs that reproduce it, the same as rlbridge's plan sets it, kept as `backend_options.<engine>`
when the adapter accepts it there, a reward rlbridge runs itself, or in conflict, each with its reason (a conflict
with the recipe's own lines, the plan's refusal); the async settings classified against the async translation; and
the round trip re-checked on the final plan. Then the import's result: the config and notes to write
(rlbridge.importer.output) and the engine defaults the plan changes (rlbridge.importer.differences)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from rlbridge.contract.config import RunConfig
from rlbridge.contract.importing import Setting, same, show_value
from rlbridge.errors import RLBridgeError
from rlbridge.importer.config_schema import (
    _MISSING,
    Leaf,
    _default_at,
    _dump,
    _value_at,
    get_path,
    leaves,
    set_path,
)
from rlbridge.importer.differences import default_differences, knob_detail
from rlbridge.importer.output import output_config, output_notes
from rlbridge.importer.report import KINDS, Entry, ImportResult
from rlbridge.importer.solver import Solver, resolve_config


class Verdicts:
    """The verdict on each setting a finished search (rlbridge.importer.solver.Solver) left, made with the search's
    own plan of a config (its cache of them) and its probes of a knob: `Verdicts(search).result(search.run())`."""

    def __init__(self, search: Solver):
        self.search = search  # the output (rlbridge.importer.output) reads the recipe's rewards and tracker from it
        # the recipe, the settings the search solved for (target, each with its line) and the engine's defaults
        self.backend, self.importer, self.recipe = search.backend, search.importer, search.recipe
        self.target, self.lines = search.target, search.lines
        self.defaults, self.unset = search.defaults, search.unset
        # the settings the search left out: the recipe's rewards (or --reward's) and its async launch
        self.rewards, self.recipe_rewards = search.rewards, search.recipe_rewards
        self.reward_settings = search.reward_settings
        self.asynchrony = search.asynchrony
        self.async_notes = search.async_notes  # the same list: the output's notes read it
        # the verdicts so far, the same list: the settings the search never took (known only when the script runs,
        # logging, set twice)
        self.entries = search.entries
        # the search's plan of a config as the recipe's keys (cached), its score, and its probes of a knob
        self.view, self.score = search.view, search.score
        self.influence, self.candidates = search.influence, search.candidates

    def result(self, data: dict[str, Any]) -> ImportResult:
        """The import's result of the solved config `data`: each setting the search left mapped (the knobs that
        move it), the same as rlbridge's plan, kept as a backend option, or in conflict (with the reason), the
        round trip re-checked, the engine defaults the plan changes, and the config and notes to write."""
        all_leaves = leaves()
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
                    detail = knob_detail(config, knobs)
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
                why += " (from " + knob_detail(config, knobs) + ")"
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
            output_config(self.search, data),
            self.entries,
            self.recipe,
            output_notes(self.search, data),
            (matched, defaults_seen),
            differences,
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
                    f"conflicts with the recipe's own line {', '.join(str(s.line) for _, s in lost[:3])}: "
                    f"{leaf.path}={show_value(value)}{extra} "
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
