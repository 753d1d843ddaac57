"""verl's own resolved config of each vendored verl launch script (Hydra compose of verl 0.9.1's packaged
ppo_trainer config with the script's overrides, as `python -m verl.trainer.main_ppo` composes it) against
the composed config of the imported job's plan, key by key. Every difference must be a recipe setting the
import report does not call reproduced, a key rlbridge sets itself (the importer's owned/action keys), or
listed under 'differs' with both values and a reason; the plan imports no engine at run time, so this test
only plans (not marked engine). Runs in the verl 0.9.1 environment."""

import importlib.metadata
from pathlib import Path

import pytest

REAL = Path(__file__).parent.parent / "fixtures" / "recipes" / "real" / "verl"
SCRIPTS = sorted(p for p in REAL.glob("*.sh") if "megatron" not in p.name)  # megatron: refused at import (FSDP only)


def _verl():
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None


pytestmark = pytest.mark.skipif(_verl() != "0.9.1", reason="runs in the verl 0.9.1 engine environment")


def _flat(cfg):
    from omegaconf import OmegaConf

    from rlbridge.contract.backend import flatten

    return flatten(OmegaConf.to_container(cfg, resolve=False))


# one script in CI (the gsm8k example); the others in `make compat` (each import takes 1-6 min on 2 busy cores)
CASES = [
    pytest.param(p, marks=[] if p.name == "gsm8k_example.sh" else [pytest.mark.matrix_only], id=p.name) for p in SCRIPTS
]


@pytest.mark.parametrize("script", CASES)
def test_imported_plan_composes_to_verls_own_config_except_listed(script, monkeypatch, tmp_path):
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.importer.solver import resolve_config
    from rlbridge.contract.importing import Setting, same
    from rlbridge_adapters.verl.validate import compose, overrides_for

    monkeypatch.setenv("DEVICE", "gpu")
    result = import_recipe(str(script), "verl")
    recipe_overrides = []
    for s in result.recipe.settings:
        key = s.spelling or s.key
        text = s.text if "$(" not in s.text else f"{key}='{s.value}'"
        recipe_overrides.append(text)
    theirs = _flat(compose(recipe_overrides))
    data = {"run_name": "run", **result.config, "engine_version": "0.9.1"}
    data["resources"] = {"gpus_per_node": 1, **result.config.get("resources", {})}
    backend = get_plugin_manager().backend("verl")
    plan = backend.plan(resolve_config(data))
    ours = _flat(compose(overrides_for(plan.native, str(tmp_path), plan.native["model"]["path"])))
    importer = backend.recipe_importer()
    listed = {d.key for d in result.differences}
    unreproduced = {e.key.lstrip("+") for e in result.entries if e.kind not in ("mapped", "same", "option")}
    silent = []
    for key, value in theirs.items():
        if key not in ours or same(ours[key], value) or (isinstance(value, str) and "${" in value):
            continue
        if key in listed or key in unreproduced or importer.special(Setting(key, value)):
            continue
        if key in ("data.train_files", "data.val_files") or str(ours[key]).startswith(str(tmp_path)):
            continue  # rlbridge writes the config's data into the run directory
        silent.append(f"{key}: verl {value!r}, plan {ours[key]!r}")
    assert not silent, "differences not listed with a reason:\n" + "\n".join(silent)
