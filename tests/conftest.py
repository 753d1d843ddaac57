import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    """Every test builds models into one private cache, never the user's."""
    path = tmp_path_factory.mktemp("rlbridge-cache")
    # the engine environments stay the user's (RLBRIDGE_CACHE_DIR as set, e.g. by a cold `make test`
    # with caches of its own): tests that train an engine in its environment find them here
    user_cache = Path(os.environ.get("RLBRIDGE_CACHE_DIR") or Path.home() / ".cache" / "rlbridge")
    os.environ.setdefault("RLBRIDGE_TEST_ENVS", str(user_cache / "envs"))
    os.environ["RLBRIDGE_CACHE_DIR"] = str(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    yield path


@pytest.fixture
def user_engine_envs():
    """The user's engine environments (RLBRIDGE_TEST_ENVS), visible read-only through the tests' private
    cache, for the tests marked `engine_env`: `make test` runs them once it created the environments."""
    from rlbridge.engine.environments import envs_dir

    real = Path(os.environ.get("RLBRIDGE_TEST_ENVS") or Path.home() / ".cache" / "rlbridge" / "envs")
    if not envs_dir().exists() and real.is_dir():
        envs_dir().parent.mkdir(parents=True, exist_ok=True)
        envs_dir().symlink_to(real)
    return envs_dir()


@pytest.fixture(autouse=True)
def _fresh_plugin_manager():
    from rlbridge.contract.registry import reset_plugin_manager

    reset_plugin_manager()
    yield
    reset_plugin_manager()


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
