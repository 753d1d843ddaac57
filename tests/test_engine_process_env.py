"""Engine processes launched from an engine environment cache PyTorch's JIT-built extensions in that
environment (rlbridge.engine.environments.engine_env_vars), not in the ~/.cache/torch_extensions that every
environment shares and rebuilds for its own torch/DeepSpeed."""

import subprocess
from pathlib import Path

import pytest

from rlbridge.engine.environments import engine_env_vars
from rlbridge.run import launch


def test_extensions_are_cached_in_the_engine_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    python = tmp_path / "envs" / "openrlhf-0.11.2" / "bin" / "python"
    assert engine_env_vars(python) == {
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "envs" / "openrlhf-0.11.2" / "torch_extensions")
    }
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/somewhere/the/user/chose")
    assert engine_env_vars(python) == {}  # the user's choice stands


def test_the_engine_process_gets_them(monkeypatch, tmp_path):
    """run_in_env starts the engine child with the variables (its Ray workers inherit them)."""
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    seen = {}

    class Stop(Exception):
        pass

    def popen(args, **kwargs):
        seen.update(kwargs["env"])
        raise Stop

    class Ctx:
        run_dir = tmp_path
        config = type("C", (), {"model_dump": lambda self, **kw: {}})()

    class Plan:
        def to_dict(self):
            return {}

    monkeypatch.setattr(subprocess, "Popen", popen)
    python = tmp_path / "env" / "bin" / "python"
    with pytest.raises(Stop):
        launch.run_in_env(python, Plan(), Ctx())
    assert seen["TORCH_EXTENSIONS_DIR"] == str(Path(tmp_path / "env" / "torch_extensions"))
