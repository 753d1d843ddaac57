"""Generate the metric-name table of docs/telemetry.md from the adapters' metric maps.

    python scripts/metric_table.py          # rewrite the table in docs/telemetry.md
    python scripts/metric_table.py --check  # exit 1 if the table is not current (a test runs this)

Each in-tree adapter's (the `rlbridge` entry points' backends) `rlbridge_adapters.<engine>.metrics.DIRECT` maps the
engine's native names to
canonical ones (TRL's per-reward names come from its `_PER_REWARD` pattern; the offline stages' from
`STAGE`, stage -> native -> canonical); "—" marks a canonical
name with no native key of that engine: rlbridge computes it, or the engine does not have it
(docs/metrics.md says which). Imports no engine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rlbridge.contract.metrics import CANONICAL

DOC = Path(__file__).resolve().parents[1] / "docs" / "telemetry.md"
BEGIN, END = "<!-- metric-table:begin (scripts/metric_table.py) -->", "<!-- metric-table:end -->"


def engines() -> list[tuple[str, object]]:
    """(backend name, its adapter's metrics module) for every in-tree backend, found through the entry points."""
    import importlib

    from rlbridge.contract.registry import get_plugin_manager

    backends = get_plugin_manager().items["backend"]
    in_tree = sorted(name for name, r in backends.items() if r.item.__module__.startswith("rlbridge_adapters."))
    return [(name, importlib.import_module(f"rlbridge_adapters.{name}.metrics")) for name in in_tree]


def natives(module) -> dict[str, list[str]]:
    """canonical name -> the engine's native names for it."""
    out: dict[str, list[str]] = {}
    for native, canonical in module.DIRECT.items():
        out.setdefault(canonical, []).append(native)
    for names in getattr(module, "STAGE", {}).values():  # the offline stages' own maps (docs/stages.md)
        for native, canonical in names.items():
            if native not in out.setdefault(canonical, []):
                out[canonical].append(native)
    pattern = getattr(module, "_PER_REWARD", None)
    if pattern is not None:  # e.g. ^rewards/(?P<name>.+)/mean$ -> rewards/<plugin>/mean
        text = re.sub(r"\(\?P<name>[^)]*\)", "<plugin>", pattern.pattern).strip("^$")
        out.setdefault("reward/<plugin>/mean", []).append(text)
    return out


def table() -> str:
    maps = [(name, natives(module)) for name, module in engines()]
    lines = ["| canonical | " + " | ".join(name for name, _ in maps) + " |", "|---|" + "---|" * len(maps)]
    for canonical in CANONICAL:
        cells = [", ".join(f"`{n}`" for n in found[canonical]) if canonical in found else "—" for _, found in maps]
        lines.append(f"| `{canonical}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(doc: str) -> str:
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    return doc[:start] + "\n" + table() + "\n" + doc[end:]


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    new = render(doc)
    if "--check" in argv:
        if new != doc:
            print(f"{DOC} is not current: run python scripts/metric_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
