"""`rlbridge import --from verl`: a recipe's training layout (issue 42) imports into the layout knobs, with the
round trip plan(import(recipe)) reproducing every key (re-checked here; tests/test_import.py's round trip covers
these fixtures too): model_engine=megatron and its sizes and offload, FSDP's fsdp_size, reshard_after_forward and
offload, the reference's offload, for the actor, the reference and verl 0.9.0's grad_offload."""

from __future__ import annotations

import pytest

from rlbridge.contract.config import RunConfig
from rlbridge.contract.registry import get_plugin_manager
from rlbridge.errors import ConfigError
from rlbridge.importer.recipe_import import import_recipe
from rlbridge.contract.importing import same
from rlbridge.run.runner import resolve
from rlbridge.contract.config import LAYOUT_KNOBS as LAYOUT
from tests.conftest import REPO

pytest.importorskip("hydra", reason="rlbridge[import] (hydra-core) parses verl's Hydra overrides")

RECIPES = REPO / "tests" / "fixtures" / "recipes"
MEGATRON_REAL = RECIPES / "real" / "verl" / "grpo_qwen3_30b_a3b_megatron.sh"
# the knobs whose keys these recipes set (the layout's, and Megatron's context parallelism)
LAYOUT_KNOBS = (*LAYOUT, "training.sequence_parallel_size")


def _round_trip(result) -> dict:
    """The written config planned again: every layout key of the recipe comes back with its value."""
    backend = get_plugin_manager().backend("verl")
    data = dict(result.config, reward=result.config["reward"] or [{"name": "digit_match"}])
    data["engine_version"] = result.recipe.version
    config = resolve(RunConfig.model_validate(data))
    view = backend.recipe_importer().view(backend.plan(config).native, config)
    owners = backend.owned_native_keys()
    layout = [s for s in result.recipe.settings if owners.get(s.key) in LAYOUT_KNOBS]
    assert layout
    for s in layout:
        assert s.key in view and same(view[s.key], s.value), f"{s.key}={s.value} planned as {view.get(s.key)}"
    kinds = {e.key: e.kind for e in result.entries if owners.get(e.key) in LAYOUT_KNOBS}
    assert set(kinds.values()) <= {"mapped", "same"}, kinds
    return result.config["training"]


def test_megatron_recipe_imports_into_the_layout_knobs(monkeypatch):
    monkeypatch.setenv("DATA_DIR", "/data")
    monkeypatch.setenv("MODEL_PATH", "/models/qwen")
    result = import_recipe(str(RECIPES / "verl" / "megatron_tp_pp.sh"), "verl", rewards=[{"name": "digit_match"}])
    training = _round_trip(result)
    assert training["strategy"] == "megatron"
    assert training["tensor_parallel_size"] == 2 and training["pipeline_parallel_size"] == 2
    # the actor's parameters stay, its optimizer and the reference's parameters are offloaded
    assert training["offload"] == {"optimizer": True, "reference": True}
    assert result.config["resources"]["gpus_per_node"] == 8 and not result.by_kind("conflict")


def test_fsdp_hybrid_shard_and_offload_recipe_imports_into_the_layout_knobs(monkeypatch):
    monkeypatch.setenv("DATA_DIR", "/data")
    monkeypatch.setenv("MODEL_PATH", "/models/qwen")
    result = import_recipe(str(RECIPES / "verl" / "fsdp_hybrid_offload.sh"), "verl", rewards=[{"name": "digit_match"}])
    training = _round_trip(result)
    assert training["sharding"] == "gradients" and training["shard_group_size"] == 4  # SHARD_GRAD_OP, fsdp_size 4
    assert training["offload"] == {"parameters": True, "optimizer": True}  # the reference follows
    assert training.get("strategy", "auto") == "auto" and not result.by_kind("conflict")


def test_verls_own_megatron_recipe_imports_on_the_version_it_was_written_for(monkeypatch):
    monkeypatch.setenv("DEVICE", "gpu")
    result = import_recipe(str(MEGATRON_REAL), "verl", "0.9.0")
    training = _round_trip(result)
    assert training["strategy"] == "megatron"
    sizes = (training["tensor_parallel_size"], training["pipeline_parallel_size"], training["expert_parallel_size"])
    assert sizes == (4, 2, 2)
    assert training["offload"] == {"parameters": True, "optimizer": True}  # grad_offload too (0.9.0), the ref follows
    grad = next(e for e in result.entries if e.key == "actor_rollout_ref.actor.megatron.grad_offload")
    assert grad.kind == "mapped" and "training.offload" in grad.detail
    # its virtual pipeline stages have no canonical knob: passed through to verl
    vpp = next(e for e in result.entries if e.key.endswith("actor.megatron.virtual_pipeline_model_parallel_size"))
    assert vpp.kind == "option"


def test_a_megatron_key_this_verl_does_not_have_is_refused_with_its_line(monkeypatch):
    monkeypatch.setenv("DEVICE", "gpu")
    # verl 0.9.1's param_offload also releases the gradient buffers: grad_offload is gone, and its Hydra refuses it
    with pytest.raises(ConfigError, match=r"megatron\.sh:155: unknown verl 0\.9\.1 key .*megatron\.grad_offload"):
        import_recipe(str(MEGATRON_REAL), "verl", "0.9.1")
