"""verl's own Hydra config of each vendored verl async launch script (fully_async_main's fully_async_ppo_trainer,
one_step_off_policy's one_step_off_ppo_trainer, composed from verl 0.9.1's package with the script's overrides, as
the entry point composes it) against the same config composed with the overrides rlbridge's translation of the
imported async knobs gives (adapters/verl/asynchrony.translate): every async key resolves to the same value, and
verl's Hydra accepts every key translate() writes. Only Hydra runs (no Ray, not marked engine). Runs in the verl
0.9.1 environment."""

import importlib.metadata
import os
from pathlib import Path

import pytest

ASYNC = Path(__file__).parent.parent / "fixtures" / "recipes" / "async" / "verl"


def _verl():
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None


pytestmark = pytest.mark.skipif(_verl() != "0.9.1", reason="runs in the verl 0.9.1 engine environment")


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
            return flatten(OmegaConf.to_container(compose(config_name=Path(name).stem, overrides=overrides), resolve=False))
    finally:
        os.chdir(cwd)
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("script", sorted(ASYNC.glob("*.sh")), ids=lambda p: p.name)
def test_translated_async_knobs_compose_to_the_scripts_own_verl_config(script):
    from rlbridge.contract.config import RunConfig
    from rlbridge.run.importer import import_recipe
    from rlbridge.run.recipe import same
    from rlbridge_adapters.verl import asynchrony

    result = import_recipe(str(script), "verl")
    native = asynchrony.translate(RunConfig.model_validate(dict(result.config, engine_version="0.9.1")))
    entry = native.pop(asynchrony.ENTRY)
    assert entry == result.recipe.extras["async_entry"]
    theirs = _compose(entry, [s.text if "$(" not in s.text else f"{s.spelling or s.key}='{s.value}'" for s in result.recipe.settings])
    ours = _compose(entry, [f"{key}={value}" for key, value in native.items()])  # Hydra refuses a key verl does not have
    differ = [f"{key}: verl {theirs.get(key)!r}, translated {ours.get(key)!r}" for key in native
              if not same(theirs.get(key), ours.get(key)) or not same(ours.get(key), native[key])]
    assert not differ, "\n".join(differ)
    if entry == asynchrony.FULLY_ASYNC:  # the keys the script leaves to fully_async_ppo_trainer.yaml resolve the same too
        assert {k for k in native if k.startswith("async_training.")} >= {
            "async_training.staleness_threshold", "async_training.trigger_parameter_sync_step",
            "async_training.require_batches", "async_training.partial_rollout"}
