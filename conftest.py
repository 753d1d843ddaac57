"""The fixtures every test of this repository gets (tests/ and each adapter's adapters/<engine>/tests): a private
model cache per session and a fresh plugin manager per test. The helpers tests import are in tests/conftest.py."""

import os
from pathlib import Path

import pytest


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
