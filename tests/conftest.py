import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"


def sandbox_unavailable() -> str:
    """Why this machine cannot run the code sandbox (rlbridge.engine.sandbox.check_available: root and
    util-linux `unshare`), or '' when it can."""
    from rlbridge.engine.sandbox import SandboxUnavailable, check_available

    try:
        check_available()
    except SandboxUnavailable as exc:
        return str(exc)
    return ""


_SANDBOX_MISSING = sandbox_unavailable()
needs_sandbox = pytest.mark.skipif(bool(_SANDBOX_MISSING), reason=_SANDBOX_MISSING or "the code sandbox is available")
"""Skips a test (or, as pytestmark, a module) that runs the code sandbox where it cannot run, with the reason."""


def run_cli(*args, cwd=None, env=None):
    """Run the real `rlbridge` command in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "rlbridge", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def write_config(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


MINIMAL = """\
backend: trl
model: {path: builtin:tiny-digits}
reward: [{name: digit_match}]
training: {steps: 2, batch_size: 2, lr: 5.0e-3}
algorithm: {group_size: 4}
rollout: {max_new_tokens: 8}
resources: {gpus_per_node: 0}
"""


def in_tree_backends() -> list[str]:
    """The backends rlbridge ships (adapters/<engine>/, importable as rlbridge_adapters.<engine>), found through the
    `rlbridge` entry points, sorted."""
    from rlbridge.contract.registry import PluginManager

    backends = PluginManager().items["backend"].items()
    return sorted(name for name, r in backends if r.item.__module__.startswith("rlbridge_adapters."))


def registered_backends() -> list[str]:
    """Every registered backend, found through the `rlbridge` entry points: a test of what every backend
    does runs on each, an engine added under adapters/ included."""
    from rlbridge.contract.registry import PluginManager

    return sorted(PluginManager().items["backend"])


def requirement_unmet_by_backend(config: dict, *knobs: str) -> dict[str, str | None]:
    """Each registered backend -> why its capability table says it cannot run `config` (a run config as a
    dict, no backend) as far as `knobs` go (all when none), or None where it can
    (rlbridge.testing.requirement_unmet): which backends a test of a requirement runs on."""
    from rlbridge.contract.registry import PluginManager
    from rlbridge.run.loading import validate_config
    from rlbridge.testing import requirement_unmet

    return {
        name: requirement_unmet(registered.item(), validate_config({**config, "backend": name}), *knobs)
        for name, registered in sorted(PluginManager().items["backend"].items())
    }


def proven_backends(config: dict) -> list:
    """The backend classes whose engine CI proves end to end at its default version (a cell of
    compat_matrix/matrix.yaml with a `ci` field; an older CI cell proves only the core seams, the matrix
    says) and whose capability table says it can run `config` (a run config as a dict, no backend): what an
    end-to-end test of a feature in the engine's environment runs on."""
    from rlbridge.contract.registry import PluginManager
    from rlbridge.envs.compat import ci_cells
    from rlbridge.run.loading import validate_config
    from rlbridge.testing import requirement_unmet

    cells = {c["cell"] for c in ci_cells()}
    found = []
    for name, registered in sorted(PluginManager().items["backend"].items()):
        backend, version = registered.item, registered.item.default_version
        if f"{name}=={version}" not in cells:
            continue
        wanted = validate_config({**config, "backend": name, "engine_version": version})
        if requirement_unmet(backend(), wanted) is None:
            found.append(backend)
    return found
