"""An imported recipe trains on its own engine (issue 18): a verl launch script, imported with
`rlbridge import`, trains on verl; an OpenRLHF command line on OpenRLHF, each at the version its recipes
are read as (the importer's default_version: verl 0.9.1, OpenRLHF 0.11.2). The tiny local model and
generated data are substituted through the recipes' own $MODEL_PATH and $DATA_DIR, and the few settings
a 2-core CPU cannot run as written are overridden (each listed below). It runs in those engines'
environments (`make compat`) and skips elsewhere. The switch to another engine (verl recipe on TRL) is
tests/test_import.py::test_imported_verl_recipe_trains_on_trl."""

import json
from pathlib import Path

import pytest

RECIPES = Path(__file__).parent.parent / "fixtures" / "recipes"


def _trains_on_its_own_engine(engine: str, recipe: str, cpu_overrides: list[str], tmp_path, monkeypatch) -> None:
    """Import RECIPES/<engine>/<recipe> and train it on `engine`, with what a 2-core CPU changes in it (the
    recipe's GPU counts, tensor parallelism and batch sizes) overridden."""
    import pandas as pd

    from rlbridge.contract.models import builtin_model_dir
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.run.loading import apply_override, validate_config
    from rlbridge.run.runner import train
    from rlbridge_plugins.data import digit_copy

    backend = get_plugin_manager().backend(engine)
    version = backend.recipe_importer().default_version  # what its recipes are read as
    if backend.installed_version() != version:
        pytest.skip(f"needs {backend.distribution} {version} installed here")
    rows = digit_copy(num_rows=256, seed=0)
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MODEL_PATH", str(builtin_model_dir("tiny-digits")))
    result = import_recipe(str(RECIPES / engine / recipe), engine, rewards=[{"name": "digit_match"}])
    assert not [
        e for e in result.entries if e.kind == "conflict" and not e.detail.startswith("conflicts with the recipe's own")
    ]
    data = dict(result.config)
    assert data["backend"] == engine and data["data"]["train"]["path"].startswith(str(tmp_path))
    for item in cpu_overrides + [
        "engine_env=current",
        "checkpoint.dir=null",
        "checkpoint.resume=false",
        f"output_dir={tmp_path / 'run'}",
        "telemetry.progress=false",
    ]:
        apply_override(data, item)
    summary = train(validate_config(data))
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) == summary["steps"] >= 2


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's engine cells keep one run per engine seam
def test_imported_verl_recipe_trains_on_verl(tmp_path, monkeypatch):
    overrides = ["resources.gpus_per_node=0", "rollout.tensor_parallel_size=1", "training.steps=3"]
    _trains_on_its_own_engine("verl", "reward_function.sh", overrides, tmp_path, monkeypatch)


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's engine cells keep one run per engine seam
def test_imported_openrlhf_recipe_trains_on_openrlhf(tmp_path, monkeypatch):
    overrides = [
        "resources.gpus_per_node=0",
        "rollout.tensor_parallel_size=1",
        "training.steps=2",
        "training.batch_size=2",
        "training.mini_batch_size=null",
        "training.micro_batch_size=null",
        "rollout.max_new_tokens=8",
        "rollout.max_prompt_tokens=16",
        "training.sequence_packing=false",
        "backend_options={}",
    ]
    _trains_on_its_own_engine("openrlhf", "grpo_hybrid_engine.sh", overrides, tmp_path, monkeypatch)
