"""verl's gsm8k example recipe (tests/fixtures/recipes/real/verl/gsm8k_example.sh, vendored from verl's
docs/examples/gsm8k_example.rst) names no reward: verl scores it with its built-in default_compute_score,
chosen by each row's data_source. Imported, it becomes `{native: verl, function:
verl.utils.reward_score:default_compute_score}` and trains 2 steps on verl 0.9.1, scoring with verl's own
function unchanged. The data is generated here in the shape verl's examples/data_preprocess/gsm8k.py writes
(data_source openai/gsm8k, chat prompt, reward_model.ground_truth), no hub; the tiny model replaces the
recipe's 7B one and a 2-core CPU's sizes replace its GPU ones (listed below). Runs in verl's environment."""

import importlib.metadata
import json

import pytest

from tests.conftest import REPO

RECIPE = REPO / "tests" / "fixtures" / "recipes" / "real" / "verl" / "gsm8k_example.sh"


def _verl():
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None


pytestmark = pytest.mark.skipif(_verl() != "0.9.1", reason="runs in the verl 0.9.1 engine environment")

CPU = [
    "resources.gpus_per_node=0",
    "rollout.tensor_parallel_size=1",
    "training.steps=2",
    "training.batch_size=2",
    "training.mini_batch_size=null",
    "training.micro_batch_size=null",
    "training.forward_micro_batch_size=null",
    "critic.micro_batch_size=null",
    "training.epochs=null",
    "data.eval=null",
    "data.eval_interval=10",
    "rollout.max_new_tokens=8",
    "rollout.max_prompt_tokens=32",
    "backend_options={}",
]


def _gsm8k_rows(n):
    rows = []
    for i in range(n):
        a, b = i % 7 + 1, i % 5 + 2
        question = f"What is {a} plus {b}?"
        rows.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": [
                    {
                        "role": "user",
                        "content": question + ' Let\'s think step by step and output the final answer after "####".',
                    }
                ],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": "train", "index": i, "answer": f"#### {a + b}", "question": question},
            }
        )
    return rows


@pytest.mark.engine
def test_gsm8k_example_trains_with_verls_default_scorer(tmp_path, monkeypatch):
    import pandas as pd

    from rlbridge.importer.recipe_import import import_recipe
    from rlbridge.run.loading import apply_override, validate_config
    from rlbridge.run.runner import train

    home = tmp_path / "home"
    (home / "data" / "gsm8k").mkdir(parents=True)
    for split, n in (("train", 64), ("test", 8)):
        pd.DataFrame(_gsm8k_rows(n)).to_parquet(home / "data" / "gsm8k" / f"{split}.parquet")
    with monkeypatch.context() as m:
        # the recipe reads $HOME/data/gsm8k/*.parquet. HOME is back before the run: Ray (2.60) keeps the
        # auth token its first cluster in this process wrote to ~/.ray, so a later cluster's GCS, started
        # with another HOME, finds none and dies (its port file never comes: "Timed out waiting for file")
        m.setenv("HOME", str(home))
        result = import_recipe(str(RECIPE), "verl")
    assert result.config["reward"] == [{"native": "verl", "function": "verl.utils.reward_score:default_compute_score"}]
    data = dict(result.config)
    data["model"] = {"path": "builtin:tiny-digits"}  # built here on first use
    for item in CPU + [
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
    assert [r["step"] for r in rows] == [1, 2]
