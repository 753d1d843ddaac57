"""OpenRLHF 0.11.2's own parser and post-parse checks (train_ppo_ray's __main__ block, adapters/openrlhf/validate.py)
accept the plan of an imported OpenRLHF async command line and read back its async flags. And verl's own Hydra config
of each vendored verl async launch script (fully_async_main's fully_async_ppo_trainer,
one_step_off_policy's one_step_off_ppo_trainer, composed from verl 0.9.1's package with the script's overrides, as
the entry point composes it) against the same config composed with the overrides rlbridge's translation of the
imported async knobs gives (adapters/verl/asynchrony.translate): every async key resolves to the same value, and
verl's Hydra accepts every key translate() writes. Only the parsers run (no Ray, not marked engine). Each test runs
in its engine's environment (OpenRLHF 0.11.2, verl 0.9.1)."""

import importlib.metadata
import os
from pathlib import Path

import pytest

ASYNC = Path(__file__).parent.parent / "fixtures" / "recipes" / "async" / "verl"


def _version(distribution: str):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


in_verl = pytest.mark.skipif(_version("verl") != "0.9.1", reason="runs in the verl 0.9.1 engine environment")
in_openrlhf = pytest.mark.skipif(
    _version("openrlhf") != "0.11.2", reason="runs in the OpenRLHF 0.11.2 engine environment"
)


@in_openrlhf
def test_openrlhf_parser_accepts_the_imported_async_plan():
    from rlbridge.contract.config import RunConfig
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.run.runner import resolve
    from rlbridge_adapters.openrlhf.validate import validate_argv

    command = (
        "python3 -m openrlhf.cli.train_ppo_ray --actor.model_name_or_path /models/tiny --actor.num_gpus_per_node 2 "
        "--vllm.num_engines 2 --vllm.tensor_parallel_size 1 --rollout.batch_size 16 --rollout.n_samples_per_prompt 4 "
        "--train.batch_size 64 --train.async_enable --train.async_queue_size 3 --train.partial_rollout_enable"
    )
    result = import_recipe(command, "openrlhf", "0.11.2")
    config = resolve(
        RunConfig.model_validate(dict(result.config, reward=[{"name": "digit_match"}], engine_version="0.11.2"))
    )
    args = validate_argv(get_plugin_manager().backend("openrlhf").plan(config).native)  # OpenRLHF's asserts run here
    assert (args.train.async_enable, args.train.async_queue_size, args.train.partial_rollout_enable) == (True, 3, True)
    assert (args.actor.num_gpus_per_node, args.vllm.num_engines, args.vllm.enable_sleep) == (2, 2, False)


def _compose(entry: str, overrides: list[str]) -> dict:
    """The entry point's config as its @hydra.main composes it (one_step_off_ppo_trainer.yaml finds ppo_trainer
    through a relative file://verl/trainer/config search path: composed from the directory holding verl)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    import verl
    from rlbridge.contract.backend import flatten
    from rlbridge_adapters.verl import asynchrony

    package, name = asynchrony.ENTRY_CONFIGS[entry]
    root = os.path.dirname(verl.__file__)
    cwd = os.getcwd()
    GlobalHydra.instance().clear()
    os.chdir(os.path.dirname(root))
    try:
        with initialize_config_dir(config_dir=os.path.join(root, "experimental", package, "config"), version_base=None):
            return flatten(
                OmegaConf.to_container(compose(config_name=Path(name).stem, overrides=overrides), resolve=False)
            )
    finally:
        os.chdir(cwd)
        GlobalHydra.instance().clear()


@in_verl
@pytest.mark.parametrize("script", sorted(ASYNC.glob("*.sh")), ids=lambda p: p.name)
def test_translated_async_knobs_compose_to_the_scripts_own_verl_config(script):
    from rlbridge.contract.config import RunConfig
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.contract.importing import same
    from rlbridge_adapters.verl import asynchrony

    result = import_recipe(str(script), "verl")
    native = asynchrony.translate(RunConfig.model_validate(dict(result.config, engine_version="0.9.1")))
    entry = native.pop(asynchrony.ENTRY)
    assert entry == result.recipe.extras["async_entry"]
    theirs = _compose(
        entry, [s.text if "$(" not in s.text else f"{s.spelling or s.key}='{s.value}'" for s in result.recipe.settings]
    )
    ours = _compose(
        entry, [f"{key}={value}" for key, value in native.items()]
    )  # Hydra refuses a key verl does not have
    differ = [
        f"{key}: verl {theirs.get(key)!r}, translated {ours.get(key)!r}"
        for key in native
        if not same(theirs.get(key), ours.get(key)) or not same(ours.get(key), native[key])
    ]
    assert not differ, "\n".join(differ)
    if (
        entry == asynchrony.FULLY_ASYNC
    ):  # the keys the script leaves to fully_async_ppo_trainer.yaml resolve the same too
        assert {k for k in native if k.startswith("async_training.")} >= {
            "async_training.staleness_threshold",
            "async_training.trigger_parameter_sync_step",
            "async_training.require_batches",
            "async_training.partial_rollout",
        }
