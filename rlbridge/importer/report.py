"""The import's result and its report: every recipe setting with its kind (mapped, same, option, owned,
reward, sink, action, conflict) and line, the engine defaults the plan changes, and the YAML config and
<stem>.import.txt report `rlbridge import` writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlbridge.contract.importing import Recipe, show_value

KINDS = {
    "mapped": "mapped to a canonical knob",
    "same": "rlbridge's plan sets the same value itself",
    "option": "kept as backend_options",
    "owned": "dropped: rlbridge sets it itself",
    "reward": "became a canonical reward entry, which rlbridge runs itself (the plan does not repeat this key)",
    "sink": "became a telemetry sink or the run's name, which rlbridge logs to itself (the engine's own logger stays off)",
    "action": "not imported: needs an rlbridge plugin or knob",
    "conflict": "not reproduced: the plan sets another value",
}


@dataclass
class Entry:
    key: str
    value: Any
    line: int | None
    kind: str
    detail: str = ""


@dataclass
class Difference:
    """An engine default (of a key the recipe leaves unset) that rlbridge's plan does not keep, and why."""

    key: str
    engine: Any
    planned: Any
    reason: str


@dataclass
class ImportResult:
    config: dict[str, Any]
    """The canonical config, as written to the YAML file."""
    entries: list[Entry]
    recipe: Recipe
    notes: list[str] = field(default_factory=list)
    defaults_matched: tuple[int, int] = (0, 0)
    differences: list[Difference] = field(default_factory=list)
    """The engine's defaults of keys the recipe leaves unset that the plan does not keep, each with its reason."""

    def by_kind(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]

    def report(self) -> str:
        r = self.recipe
        lines = [f"# rlbridge import of {r.source} (read as {r.engine} {r.version})"]
        counts = ", ".join(f"{len(self.by_kind(k))} {k}" for k in KINDS)
        lines.append(f"# {len(self.entries)} settings: {counts}")
        if self.defaults_matched[1]:
            lines.append(
                f"# {r.engine} defaults the recipe leaves unset, reproduced: {self.defaults_matched[0]} of {self.defaults_matched[1]}"
                + (f"; the {len(self.differences)} others are listed under 'differs'" if self.differences else "")
            )
        for kind, title in KINDS.items():
            entries = self.by_kind(kind)
            if not entries:
                continue
            lines.append(f"\n{kind}: {title}")
            for e in entries:
                where = f"{r.source}:{e.line}" if e.line else r.source
                lines.append(
                    f"  {e.key}={show_value(e.value)}  ({where})" + (f"\n      -> {e.detail}" if e.detail else "")
                )
        if self.differences:
            lines.append(
                f"\ndiffers: {r.engine}'s own defaults of keys the recipe leaves unset, which the plan changes"
            )
            for d in self.differences:
                lines.append(
                    f"  {d.key}: {r.engine} {show_value(d.engine)}, rlbridge {show_value(d.planned)}\n      -> {d.reason}"
                )
        for line, note in r.notes:
            lines.append(f"note: {r.where(line)}: {note}")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines) + "\n"

    def report_data(self) -> dict[str, Any]:
        return {
            "source": self.recipe.source,
            "engine": self.recipe.engine,
            "version": self.recipe.version,
            "settings": [
                {"key": e.key, "value": e.value, "line": e.line, "kind": e.kind, "detail": e.detail}
                for e in self.entries
            ],
            "notes": [f"{self.recipe.where(line)}: {n}" for line, n in self.recipe.notes] + self.notes,
            "differences": [
                {"key": d.key, "engine": d.engine, "planned": d.planned, "reason": d.reason} for d in self.differences
            ],
        }

    def to_yaml(self) -> str:
        head = (
            f"# imported by `rlbridge import {self.recipe.source} --from {self.recipe.engine}` "
            f"({self.recipe.engine} {self.recipe.version}); the import report lists what did not map\n"
        )
        return head + yaml.safe_dump(self.config, sort_keys=False)


def write(result: ImportResult, output: Path) -> Path:
    """Write the config and, next to it, the report (<stem>.import.txt)."""
    output.write_text(result.to_yaml())
    report = output.with_name(output.stem + ".import.txt")
    report.write_text(result.report())
    return report
