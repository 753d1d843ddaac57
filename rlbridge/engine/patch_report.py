"""What the patches really did, per process, and whether their targets changed upstream.

* Attribution: while `rlbridge.engine.patches.apply_patches` calls a patch's `apply`, every
  post-import hook it registers (rlbridge.engine.importhooks) is tagged with the patch's name. A
  patch is reported `applied` in a process only once its code ran there: `apply` itself when it
  registers no hook, else at least one of its hooks (its target module was imported). A patch whose
  hooks never fired reports `registered: target never imported in this process`.
* Per-process reports: every process that applies patches (the engine driver, each Ray worker, each
  vLLM worker: they all run the adapter's bootstrap) writes `<RLBRIDGE_PATCH_DIR>/<pid>.json`, and
  rewrites it each time one of its hooks fires. `merge(run_dir)` turns them into the run's
  patches.json: per process, and per patch the processes it ran in.
* Fingerprints: a patch names its targets (module, qualified name) and a fingerprint of the
  upstream source it was written against: the first 12 hex digits of the SHA-256 of the target's
  source as `ast.unparse` prints it (comments and formatting do not count). `drift(patches)` reads
  the installed source without importing anything and reports targets that differ or are gone.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PATCH_DIR_ENV = "RLBRIDGE_PATCH_DIR"


@dataclass(frozen=True)
class Target:
    """The upstream code a patch replaces or relies on."""

    module: str
    qualname: str
    """Dotted name inside the module ('Class.method'); '' for the whole module."""
    fingerprints: tuple[str, ...]
    """Fingerprints of the versions the patch was written against and verified on."""
    versions: str = ""
    """Only for these versions of the patch's gating distribution (PEP 440; '' for all of its range),
    for a patch whose target moved between the versions it covers."""


# --- fingerprints -----------------------------------------------------------------------------------


def module_file(module: str, search_path: list[str] | None = None) -> Path | None:
    """The source file of `module`, found without importing it (or its parent packages); in
    `search_path` (another environment's site-packages) instead of sys.path when given."""
    top, *rest = module.split(".")
    try:
        spec = (
            importlib.util.find_spec(top)
            if search_path is None
            else importlib.machinery.PathFinder.find_spec(top, search_path)
        )
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return Path(spec.origin) if spec and spec.origin and not rest else None
    for location in spec.submodule_search_locations:
        base = Path(location).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def fingerprint(module: str, qualname: str, search_path: list[str] | None = None) -> str | None:
    """Fingerprint of the installed source of module:qualname; None if it is not there."""
    path = module_file(module, search_path)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    node: ast.AST | None = tree
    for part in qualname.split(".") if qualname else []:
        body = getattr(node, "body", [])
        found = None
        for child in body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child.name == part:
                found = child
            elif isinstance(child, (ast.Assign, ast.AnnAssign)):
                names = [
                    t.id
                    for t in (child.targets if isinstance(child, ast.Assign) else [child.target])
                    if isinstance(t, ast.Name)
                ]
                if part in names:
                    found = child
        node = found
        if node is None:
            return None
    return hashlib.sha256(ast.unparse(node).encode()).hexdigest()[:12]


def drift(patches) -> list[dict[str, Any]]:
    """Each target of each patch: its fingerprint here, and whether it matches what the patch was
    written against ('ok'), differs ('drifted') or is gone ('missing'). Imports nothing."""
    from packaging.specifiers import SpecifierSet

    out = []
    for patch in patches:
        installed = _installed(patch.engine)
        for target in getattr(patch, "targets", ()):
            if target.versions and (
                installed is None or not SpecifierSet(target.versions).contains(installed, prereleases=True)
            ):
                continue
            here = fingerprint(target.module, target.qualname)
            status = "missing" if here is None else ("ok" if here in target.fingerprints else "drifted")
            out.append(
                {
                    "patch": patch.name,
                    "target": f"{target.module}:{target.qualname}",
                    "status": status,
                    "fingerprint": here,
                    "expected": list(target.fingerprints),
                }
            )
    return out


def _installed(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


# --- attribution inside one process -----------------------------------------------------------------

_state: dict[str, dict[str, Any]] = {}
_current: list[str] = []


def begin(name: str) -> None:
    """apply_patches is about to call patch `name`'s apply()."""
    _current.append(name)
    _state.setdefault(name, {"hooks": {}, "apply_ran": False})


def end(name: str) -> None:
    _state[name]["apply_ran"] = True
    _current.pop()


class acting_for:
    """While a patch's hook runs: what it registers belongs to the same patch."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self):
        _current.append(self.name)

    def __exit__(self, *exc):
        _current.pop()
        return False


def owner() -> str | None:
    """The patch whose apply() (or hook) is running now, if any."""
    return _current[-1] if _current else None


def hook_registered(patch: str, module: str) -> None:
    _state.setdefault(patch, {"hooks": {}, "apply_ran": False})["hooks"].setdefault(module, None)


def hook_ran(patch: str, module: str) -> None:
    _state.setdefault(patch, {"hooks": {}, "apply_ran": False})["hooks"][module] = time.time()
    write_process_report()


def outcome(name: str) -> dict[str, Any]:
    """'applied' only when the patch's code ran in this process."""
    state = _state.get(name)
    if state is None or not state["apply_ran"]:
        return {"status": "not applied"}
    hooks = state["hooks"]
    ran = sorted(m for m, t in hooks.items() if t is not None)
    pending = sorted(m for m, t in hooks.items() if t is None)
    if hooks and not ran:
        return {"status": "registered: target never imported in this process", "waiting_for": pending}
    out: dict[str, Any] = {"status": "applied"}
    if ran:
        out["ran_at_import_of"] = ran
    if pending:
        out["waiting_for"] = pending
    return out


_decisions: list[dict[str, Any]] = []


def record(decisions: list[dict[str, Any]]) -> None:
    """The decisions apply_patches made (status per patch) in this process."""
    _decisions.extend(decisions)
    write_process_report()


def process_name() -> str:
    """What the process is, as `ps` shows it (Ray renames its workers 'ray::Actor.method')."""
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            parts = [p.decode(errors="replace") for p in fh.read().split(b"\0") if p]
    except OSError:
        parts = list(sys.argv)
    text = " ".join(parts)
    return text[:160]


def process_report() -> dict[str, Any]:
    patches = []
    for decision in _decisions:
        entry = dict(decision)
        if decision["status"] == "applied":
            entry.update(outcome(decision["patch"]))
        patches.append(entry)
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "process": process_name(),
        "written": time.time(),
        "patches": patches,
    }


def write_process_report() -> None:
    directory = os.environ.get(PATCH_DIR_ENV)
    if not directory or not _decisions:
        return
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        path = Path(directory) / f"{os.getpid()}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(process_report(), indent=2))
        os.replace(tmp, path)
    except OSError:
        pass


# --- the run's report ---------------------------------------------------------------------------------


def merge(run_dir: Path | str, drift_report: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """patches.json of a run: every process's report, and per patch where it ran."""
    directory = Path(run_dir) / "patches"
    reports = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if not reports:
        return None
    by_patch: dict[str, dict[str, Any]] = {}
    for report in reports:
        for entry in report["patches"]:
            item = by_patch.setdefault(
                entry["patch"],
                {"engine": entry.get("engine"), "version": entry.get("version"), "applied_in": [], "other": {}},
            )
            if entry["status"] == "applied":
                item["applied_in"].append(
                    {
                        "pid": report["pid"],
                        "process": report["process"],
                        "ran_at_import_of": entry.get("ran_at_import_of", []),
                    }
                )
            else:
                item["other"].setdefault(entry["status"], []).append(report["pid"])
    if drift_report is None:
        previous = Path(run_dir) / "patches_drift.json"
        drift_report = json.loads(previous.read_text()) if previous.exists() else []
    merged = {"processes": reports, "by_patch": by_patch, "drift": drift_report}
    (Path(run_dir) / "patches.json").write_text(json.dumps(merged, indent=2) + "\n")
    return merged
