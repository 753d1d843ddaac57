"""Patches report what really happened: 'applied' only once the patch's code ran in that process,
one report per process merged into the run's patches.json, and target fingerprints that notice an
upstream change (rlbridge.engine.patch_report)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from rlbridge.engine import patch_report
from rlbridge.engine.patch_report import PATCH_DIR_ENV, Target, drift, fingerprint, merge
from rlbridge.engine.patches import Patch, PatchKind, apply_patches

TARGET_SOURCE = textwrap.dedent("""
    def compute(x):
        return x + 1


    class Engine:
        def step(self):
            return "upstream"
""")


@pytest.fixture
def upstream(tmp_path, monkeypatch):
    """A stand-in upstream package, importable but not imported yet."""
    pkg = tmp_path / "site" / "rlb_upstream_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text(TARGET_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv(PATCH_DIR_ENV, str(tmp_path / "run" / "patches"))
    monkeypatch.setattr(patch_report, "_state", {})
    monkeypatch.setattr(patch_report, "_decisions", [])
    for name in ("rlb_upstream_pkg", "rlb_upstream_pkg.engine", "rlb_upstream_pkg.never"):
        sys.modules.pop(name, None)
    yield pkg
    for name in ("rlb_upstream_pkg", "rlb_upstream_pkg.engine"):
        sys.modules.pop(name, None)


def _patch(name, module, **kw):
    from rlbridge.engine.importhooks import when_imported

    def apply():
        def change(mod):
            mod.Engine.step = lambda self: "patched"

        when_imported(module, change)

    return Patch(
        name=name,
        engine="pytest",
        versions=">=0",
        kind=PatchKind.CPU_ENABLEMENT,
        fixes="f",
        why="w",
        probe=lambda: True,
        apply=apply,
        **kw,
    )


def test_applied_only_once_the_target_module_is_imported_in_this_process(upstream, tmp_path):
    patches = [
        _patch("waits-for-engine", "rlb_upstream_pkg.engine"),
        _patch("never-imported", "rlb_upstream_pkg.never"),
    ]
    report = apply_patches(patches, {})
    assert report[0]["status"].startswith("registered: target never imported")  # nothing ran yet
    reports = tmp_path / "run" / "patches"
    mine = json.loads((reports / f"{os.getpid()}.json").read_text())
    assert mine["pid"] == os.getpid() and all(p["status"].startswith("registered") for p in mine["patches"])

    import rlb_upstream_pkg.engine as engine  # the engine imports its module: the hook runs now

    assert engine.Engine().step() == "patched"
    mine = {p["patch"]: p for p in json.loads((reports / f"{os.getpid()}.json").read_text())["patches"]}
    assert mine["waits-for-engine"]["status"] == "applied"
    assert mine["waits-for-engine"]["ran_at_import_of"] == ["rlb_upstream_pkg.engine"]
    assert mine["never-imported"]["status"].startswith("registered: target never imported")


def test_every_process_reports_and_the_run_report_merges_them(upstream, tmp_path):
    apply_patches([_patch("waits-for-engine", "rlb_upstream_pkg.engine")], {})
    __import__("rlb_upstream_pkg.engine")
    # a second process of the run (a Ray worker would run the adapter's bootstrap the same way)
    # applies the patch but never imports the target
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(upstream.parent)!r})
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_patch_report import _patch
        from rlbridge.engine.patches import apply_patches
        apply_patches([_patch("waits-for-engine", "rlb_upstream_pkg.engine")], {{}})
    """)
    res = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=os.environ.copy())
    assert res.returncode == 0, res.stderr
    merged = merge(tmp_path / "run")
    assert len(merged["processes"]) == 2
    entry = merged["by_patch"]["waits-for-engine"]
    assert [p["pid"] for p in entry["applied_in"]] == [os.getpid()]
    ((other_status, pids),) = entry["other"].items()
    assert other_status.startswith("registered: target never imported") and pids != [os.getpid()]
    assert json.loads((tmp_path / "run" / "patches.json").read_text()) == merged


def test_a_changed_upstream_target_is_reported_drifted(upstream):
    here = fingerprint("rlb_upstream_pkg.engine", "Engine.step")
    assert here and "rlb_upstream_pkg.engine" not in sys.modules  # read without importing it
    patch = _patch(
        "p",
        "rlb_upstream_pkg.engine",
        targets=(
            Target("rlb_upstream_pkg.engine", "Engine.step", (here,)),
            Target("rlb_upstream_pkg.engine", "compute", ("000000000000",)),
            Target("rlb_upstream_pkg.engine", "Engine.gone", ("000000000000",)),
        ),
    )
    assert [d["status"] for d in drift([patch])] == ["ok", "drifted", "missing"]
    # comments and formatting are not a change; code is
    (upstream / "engine.py").write_text(TARGET_SOURCE.replace('return "upstream"', 'return "upstream"  # note'))
    assert fingerprint("rlb_upstream_pkg.engine", "Engine.step") == here
    (upstream / "engine.py").write_text(TARGET_SOURCE.replace('return "upstream"', 'return "changed"'))
    assert drift([patch])[0]["status"] == "drifted"


def test_a_target_scoped_to_other_versions_is_not_checked(upstream, monkeypatch):
    monkeypatch.setattr(patch_report, "_installed", lambda dist: "0.9.1")
    patch = _patch(
        "p",
        "rlb_upstream_pkg.engine",
        targets=(Target("rlb_upstream_pkg.engine", "compute", ("000000000000",), versions="<0.6"),),
    )
    assert drift([patch]) == []
