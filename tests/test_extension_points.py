"""Every extension point a backend or plugin may provide is declared on the contract with a default
(issue 31), and a hook implementation that matches no hook is an error naming it and its plugin."""

import inspect

import pytest

from rlbridge import hookimpl
from rlbridge.contract.backend import Backend, TrainingContext, honoured
from rlbridge.contract.registry import PluginManager, get_plugin_manager, reset_plugin_manager
from rlbridge.errors import ConfigError, RLBridgeError
from rlbridge.testing import install_plugin_distribution

MISSPELLED = """
from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin

@hookimpl
def rlbridge_register_reward():  # one letter short of rlbridge_register_rewards
    return [RewardPlugin("never_seen", lambda: None, "a reward nobody would find")]
"""


def test_a_misspelled_hook_of_an_installed_plugin_fails_start_up_naming_hook_and_plugin(tmp_path, monkeypatch):
    install_plugin_distribution(tmp_path / "site", "rlbridge_typo_plugin", MISSPELLED, monkeypatch)
    reset_plugin_manager()
    with pytest.raises(RLBridgeError) as info:
        get_plugin_manager()
    message = str(info.value)
    assert "'rlbridge_register_reward'" in message and "plugin 'rlbridge_typo_plugin'" in message, message
    assert "distribution 'rlbridge-typo-plugin'" in message and "did you mean 'rlbridge_register_rewards'" in message, (
        message
    )


def test_a_misspelled_hook_registered_by_hand_is_refused_and_left_out():
    class Typo:
        @hookimpl
        def rlbridge_step_ended(self, step, metrics):
            pass

    pm = PluginManager(load_entry_points=False)
    with pytest.raises(RLBridgeError, match="'rlbridge_step_ended'.*did you mean 'rlbridge_step_end'"):
        pm.register(Typo(), "typo")
    assert pm.pm.get_plugin("typo") is None


class Bare(Backend):
    """A backend that declares only what is required."""

    name = "bare"
    distribution = "rlbridge-bare-engine"
    supported_versions = ">=1"

    def capabilities(self):
        return [honoured("training.steps", "steps")]

    def translate(self, config):
        return {"steps": config.training.steps}

    def run(self, plan, ctx):
        pass


def test_optional_extension_points_have_declared_defaults():
    from rlbridge.contract.backend import Plan

    bare = Bare()
    plan = Plan("bare", "rlbridge-bare-engine", "rlbridge-bare-engine>=1", {"steps": 3})
    assert bare.render_native(plan) == plan.to_yaml()
    assert bare.recipe_importer() is None
    assert bare.native_arm is None
    assert bare.knob_effects() == {}
    # each is declared on Backend itself, not found with hasattr
    for name in ("render_native", "recipe_importer", "native_arm", "knob_effects", "patches", "validate"):
        assert name in vars(Backend), name


def test_training_context_declares_what_adapters_call():
    declared = {name for name, _ in inspect.getmembers(TrainingContext, inspect.isfunction)}
    assert {"emit_step", "emit_eval", "checkpoint_saved"} <= declared
    from rlbridge.engine.child import ChildContext
    from rlbridge.run.runtime import RunContext

    for context in (RunContext, ChildContext):  # both implementations have every declared method, alike
        for name in ("emit_step", "emit_eval", "checkpoint_saved"):
            params = list(inspect.signature(getattr(context, name)).parameters)[:3]
            assert params == list(inspect.signature(getattr(TrainingContext, name)).parameters)[:3], (context, name)


def test_every_in_tree_backend_declares_a_native_arm_module_that_exists():
    import importlib.util

    for name, registered in get_plugin_manager().items["backend"].items():
        module = registered.item.native_arm
        if module is not None:
            assert importlib.util.find_spec(module) is not None, (name, module)


def test_a_backend_without_recipe_importer_is_refused_by_name():
    from rlbridge.importer.recipe_import import import_recipe

    pm = PluginManager(load_entry_points=False)

    class Plugin:
        @hookimpl
        def rlbridge_register_backends(self):
            return [Bare]

    pm.register(Plugin(), "bare")
    with pytest.raises(ConfigError, match="backend 'bare' has no recipe importer"):
        import_recipe("train.sh", "bare", plugins=pm)
