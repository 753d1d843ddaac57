"""rlbridge's conformance suite, shipped with rlbridge (like `sqlalchemy.testing.suite`).

A backend package, in-tree or third-party, proves itself by importing the suite into one of its
test modules and naming its backend:

    # tests/test_rlbridge_suite.py of your package
    import pytest
    from rlbridge.testing.suite import *  # noqa: F401,F403

    @pytest.fixture
    def backend():
        return MyBackend()

Without that fixture the suite runs against every registered backend whose engine is installed
(what rlbridge's own tests/conformance does in each engine environment). Which tests apply is read
from the backend's declared capability table (`requirement_unmet`), never inferred from errors: a
backend that rejects `environment` skips the environment test with the table's reason.
"""

from __future__ import annotations

from pathlib import Path
from rlbridge.contract.backend import Backend, Support, _dumpable, knob_default, knob_value
from rlbridge.contract.config import RunConfig

# configs/quickstart.yaml of the checkout (a link, so the wheel carries the same file): GRPO on the
# tiny builtin model, digit_copy rows, digit_match reward.
QUICKSTART = Path(__file__).with_name("quickstart.yaml")


def standard_configs() -> list[Path]:
    """The ready-to-run run configs of the checkout when rlbridge runs from one (bench specs,
    `bench-*.yaml`, and pipelines, a top-level `stages` list, are not run configs), else the quickstart."""
    import yaml

    checkout = QUICKSTART.resolve().parent
    if checkout.name != "configs":
        return [QUICKSTART]
    return sorted(
        p
        for p in checkout.glob("*.yaml")
        if not p.name.startswith("bench-") and "stages" not in (yaml.safe_load(p.read_text()) or {})
    )


def requirement_unmet(backend: Backend, config: RunConfig, *knobs: str) -> str | None:
    """Why `backend` cannot run `config` as asked, from its declared capability table only: the
    first of `knobs` (default: every knob, as planning checks them: a rejected one when it is not
    at its default, a value check whatever the value, e.g. verl 0.7.1 has no CPU rollout for
    rollout.engine: auto) that it rejects, or whose value check refuses this value. None when the
    backend declares it can."""
    table = backend.capability_table()
    for knob in knobs or list(table):
        cap = table[knob]
        if cap.support is Support.REJECTED and _dumpable(knob_value(config, knob)) != _dumpable(knob_default(knob)):
            return f"{knob}: {cap.note}"
        problem = cap.check(config) if cap.check is not None else None
        if problem:
            return f"{knob}: {problem}"
    return None


def install_plugin_distribution(site: Path, module: str, source: str, monkeypatch) -> None:
    """Install `source` as module `module` in a real distribution with an `rlbridge` entry point
    under `site`, visible to this process and to every process it starts (PYTHONPATH), so that engine
    processes (Ray workers included) find the plugin exactly as they would a user's installed one."""
    import importlib
    import os

    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[rlbridge]\n{module} = {module}\n")
    (site / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    importlib.invalidate_caches()
