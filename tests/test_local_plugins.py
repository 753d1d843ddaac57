"""Plugins without packaging: `plugins:` in the config and `-p` on the CLI load modules by file or
module name, in the user's process and in every process of the run (through RLBRIDGE_PLUGINS)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlbridge.contract.local_plugins import PLUGINS_ENV, export_local_plugins, register_local_plugins
from rlbridge.contract.registry import PluginManager
from rlbridge.errors import ConfigError
from rlbridge.run.loading import load_config

REPO = Path(__file__).resolve().parents[1]
PLUGIN = """
from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin

def constant(value: float = 0.5):
    return lambda inputs: [value] * len(inputs)

@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("local_constant", constant, "a local plugin")]
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A config with a plugin file and a native reward beside it, used from another directory."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "my_plugin.py").write_text(PLUGIN)
    (tmp_path / "proj" / "scores.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    )
    (tmp_path / "proj" / "run.yaml").write_text(
        textwrap.dedent("""
        plugins: [my_plugin.py]
        reward:
          - {name: local_constant}
          - {native: verl, function: scores.py:compute_score}
    """)
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    return tmp_path / "proj"


def test_paths_resolve_relative_to_the_config_file(project):
    config = load_config(project / "run.yaml")
    assert config.plugins == [str(project / "my_plugin.py")]
    assert config.reward[1].function == f"{project / 'scores.py'}:compute_score"
    assert config.reward[1].name == "compute_score"  # the name its metrics are logged under


def test_registered_in_this_process_and_in_a_new_process(project):
    config = load_config(project / "run.yaml")
    pm = PluginManager()
    assert "local_constant" not in pm.items["reward"]
    register_local_plugins(pm, config.plugins)
    register_local_plugins(pm, config.plugins)  # idempotent
    entry = pm.items["reward"]["local_constant"]
    assert entry.distribution == "(local)" and entry.item.factory(0.25)([1, 2]) == [0.25, 0.25]
    export_local_plugins(config.plugins)
    try:
        # an engine process: inherits the environment, builds its plugin manager from it
        code = "from rlbridge.contract.registry import PluginManager; print(sorted(PluginManager().items['reward']))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
        assert "local_constant" in out
    finally:
        export_local_plugins([])


def test_module_name_and_cli_option(project, monkeypatch):
    from rlbridge.cli import _load

    monkeypatch.syspath_prepend(str(project))
    pm = PluginManager()
    register_local_plugins(pm, ["my_plugin"])  # an importable module name
    assert "local_constant" in pm.items["reward"]
    config = _load(project / "run.yaml", [], ["proj/my_plugin.py", "json"])  # -p: relative to the current directory
    assert config.plugins == [str(project / "my_plugin.py"), str(project / "my_plugin.py"), "json"]


def test_missing_plugin_is_one_line_naming_the_entry(project):
    with pytest.raises(ConfigError, match=r"^plugins\[1\]: no file nothere\.py"):
        register_local_plugins(PluginManager(), [str(project / "my_plugin.py"), "nothere.py"])
    with pytest.raises(ConfigError, match=r"^plugins\[0\]: cannot import module 'no_such_module_xyz'"):
        register_local_plugins(PluginManager(), ["no_such_module_xyz"])


def test_native_entry_without_function_is_a_config_error(tmp_path):
    (tmp_path / "c.yaml").write_text("reward: [{native: trl}]\n")
    with pytest.raises(ConfigError, match="needs function: FILE.py:NAME"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text("reward: [{native: jax, function: a.py:f}]\n")
    with pytest.raises(ConfigError, match="reward.0.native"):
        load_config(tmp_path / "c.yaml")


def test_a_local_module_imports_by_name_in_a_fresh_process(project):
    """A spawned worker (the reward pool) unpickles a local plugin's function by its module name."""
    from rlbridge.contract.local_plugins import load_module, module_name

    module = load_module(str(project / "my_plugin.py"), "plugins[0]")
    assert module.__name__ == module_name(project / "my_plugin.py")
    code = (
        f"import importlib, rlbridge.contract.local_plugins; m = importlib.import_module({module.__name__!r}); "
        "print(m.constant(2.0)([0]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.strip() == "[2.0]"
