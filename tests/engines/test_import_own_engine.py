"""An imported recipe trains on its own engine (issue 18): a verl launch script, imported with
`rlbridge import`, trains on verl 0.9.1; an OpenRLHF command line on OpenRLHF 0.11.2. The tiny local
model and generated data are substituted through the recipes' own $MODEL_PATH and $DATA_DIR, and the
few settings a 2-core CPU cannot run as written are overridden (each listed below). It runs in those
engines' environments (`make compat`) and skips elsewhere. The switch to another engine (verl recipe
on TRL) is tests/test_import.py::test_imported_verl_recipe_trains_on_trl."""

import importlib.metadata
import json
from pathlib import Path

import pytest

RECIPES = Path(__file__).parent.parent / "fixtures" / "recipes"


def _installed(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


PROVEN = (("verl", "0.9.1"), ("openrlhf", "0.11.2"))
BACKEND = next((b for b, v in PROVEN if _installed(b) == v), None)
pytestmark = pytest.mark.skipif(BACKEND is None, reason="needs verl 0.9.1 or OpenRLHF 0.11.2 installed here")

# recipe, and what a 2-core CPU changes in it (the recipe's GPU counts, tensor parallelism and batch sizes)
CASES = {
    "verl": ("reward_function.sh", ["resources.gpus_per_node=0", "rollout.tensor_parallel_size=1", "training.steps=3"]),
    "openrlhf": (
        "grpo_hybrid_engine.sh",
        [
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
        ],
    ),
}


@pytest.mark.engine
@pytest.mark.matrix_only  # make compat only: CI's engine cells keep one run per engine seam
def test_imported_recipe_trains_on_its_own_engine(tmp_path, monkeypatch):
    import pandas as pd

    from rlbridge.contract.models import builtin_model_dir
    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.run.loading import apply_override, validate_config
    from rlbridge.run.runner import train
    from rlbridge_plugins.data import digit_copy

    rows = digit_copy(num_rows=256, seed=0)
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MODEL_PATH", str(builtin_model_dir("tiny-digits")))
    name, overrides = CASES[BACKEND]
    result = import_recipe(str(RECIPES / BACKEND / name), BACKEND, rewards=[{"name": "digit_match"}])
    assert not [
        e for e in result.entries if e.kind == "conflict" and not e.detail.startswith("conflicts with the recipe's own")
    ]
    data = dict(result.config)
    assert data["backend"] == BACKEND and data["data"]["train"]["path"].startswith(str(tmp_path))
    for item in overrides + [
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
