"""The run manifest and `rlbridge reproduce`, on real TRL runs (quickstart, HF rollout, 3 steps)."""

import importlib.metadata
import json
import shutil
import sys

import pytest

from conftest import QUICKSTART, run_cli

# non-default values: a seed, a group size, a row count and a learning rate of their own
OVERRIDES = ["training.steps=3", "training.batch_size=4", "algorithm.group_size=4", "training.seed=7",
             "training.lr=0.01", "data.train.args.num_rows=300", "rollout.max_new_tokens=8"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    out = tmp_path_factory.mktemp("reproduce") / "original"
    train(load_config(QUICKSTART, [*OVERRIDES, f"output_dir={out}"]), progress=False)
    return out


def test_manifest_records_source_environment_data_model_seeds_and_hardware(finished_run):
    from rlbridge.contract.data import load_rows, rows_digest
    from rlbridge.envs.provenance import _normalized
    from rlbridge.run.loading import load_config
    from rlbridge.run.manifest import config_digest, packages_digest

    manifest = json.loads((finished_run / "manifest.json").read_text())
    assert "manifest.json" in json.loads((finished_run / "summary.json").read_text())["files"]
    assert not (finished_run / "manifest.d").exists()  # merged, then removed
    assert manifest["rlbridge"]["commit"] and len(manifest["rlbridge"]["commit"]) == 40
    assert (manifest["rlbridge"]["diff_sha256"] is None) == (manifest["rlbridge"]["dirty"] is False)
    # the package set is this environment's, as importlib.metadata reads it, every distribution
    packages = manifest["engine_env"]["packages"]
    expected = {}
    for dist in importlib.metadata.distributions():  # sys.path order: the first one is what imports
        expected.setdefault(_normalized(dist.metadata["Name"]), dist.version)
    assert packages == {k: expected[k] for k in packages} and set(expected) <= set(packages)
    assert packages["torch"] == importlib.metadata.version("torch")
    assert manifest["engine_env"]["packages_sha256"] == packages_digest(packages)
    assert manifest["engine_env"]["python"] == sys.executable
    # the rows the engine loaded, hashed as loaded: 300 rows of seed 7
    config = load_config(finished_run / "config.yaml", [])
    rows = load_rows(config.data.train, config, "data.train")
    assert manifest["data"]["data.train"]["rows"] == 300
    assert manifest["data"]["data.train"]["rows_sha256"] == rows_digest(rows)
    assert manifest["job"]["config_sha256"] == config_digest(config.model_dump(mode="json"))
    model = manifest["models"]["model.path"]
    assert model["path"] == "builtin:tiny-digits" and len(model["sha256"]) == 64 and model["files"] >= 3
    assert manifest["seeds"]["training.seed"] == 7
    assert manifest["hardware"]["cpus"] >= 1 and "gpus" in manifest["hardware"]
    assert manifest["python"]["version"].count(".") == 2 and manifest["os"]["system"]


def test_reproduce_a_finished_trl_run_is_identical(finished_run, tmp_path):
    out = tmp_path / "rerun"
    res = run_cli("reproduce", str(finished_run), "--output", str(out), "--no-progress")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("identical"), res.stdout
    report = json.loads((out / "reproduce.json").read_text())
    assert report["verdict"] == "identical" and report["steps"] == [3, 3] and report["first_difference"] is None
    # nothing that changes the computation differs (the uncommitted diff may: others edit the tree)
    assert not [d for d in report["manifest_differences"] if not d.startswith("rlbridge uncommitted diff")]


def test_reproduce_refuses_an_environment_it_cannot_match_and_names_the_packages(finished_run, tmp_path):
    from rlbridge.run.reproduce import ReproduceError, reproduce

    changed = tmp_path / "changed-env"
    shutil.copytree(finished_run, changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["engine_env"]["packages"]["torch"] = "2.0.1"
    manifest["engine_env"]["packages"]["ghost-distribution"] = "1.0"
    (changed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ReproduceError) as err:
        reproduce(changed, tmp_path / "never")
    here = importlib.metadata.version("torch")
    assert f"package torch: 2.0.1 -> {here}" in str(err.value)
    assert "package ghost-distribution: 1.0 -> absent" in str(err.value)
    assert not (tmp_path / "never").exists()  # nothing ran


def test_reproduce_names_the_first_differing_step_and_what_in_the_manifests_differs(finished_run, tmp_path):
    """A run whose data and metrics were not those of this checkout: the verdict names step 2's reward
    and the data hash and seed the manifests disagree on."""
    from rlbridge.run.reproduce import describe, reproduce

    changed = tmp_path / "changed-run"
    shutil.copytree(finished_run, changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["data"]["data.train"]["rows_sha256"] = "0" * 64
    manifest["models"]["model.path"]["sha256"] = "f" * 64
    (changed / "manifest.json").write_text(json.dumps(manifest))
    rows = [json.loads(line) for line in (changed / "metrics.jsonl").read_text().splitlines()]
    rows[1]["reward/mean"] += 0.25
    (changed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = reproduce(changed, tmp_path / "rerun")
    assert report["verdict"] in ("different", "same within noise")
    assert report["first_difference"]["step"] == 2 and report["first_difference"]["metric"] == "reward/mean"
    assert f"data.train rows_sha256: {'0' * 64} -> {manifest_rows(finished_run)}" in report["manifest_differences"]
    assert any(d.startswith("model.path model sha256: ffff") for d in report["manifest_differences"])
    text = describe(report)
    assert "first difference: step 2, reward/mean" in text and "data.train rows_sha256" in text


def manifest_rows(run_dir):
    return json.loads((run_dir / "manifest.json").read_text())["data"]["data.train"]["rows_sha256"]


def test_compare_verdicts():
    from rlbridge.run.reproduce import compare

    base = [{"step": s, "reward/mean": 0.1 * s, "loss/policy": 0.01, "timing/step_s": 1.0 + s} for s in range(1, 9)]
    timing_only = [{**r, "timing/step_s": 9.0} for r in base]
    assert compare(base, timing_only)["verdict"] == "identical"  # timings are measured, not computed
    noisy = [{**r, "reward/mean": r["reward/mean"] + (0.01 if r["step"] % 2 else -0.01)} for r in base]
    out = compare(base, noisy)
    assert out["verdict"] == "same within noise" and out["first_difference"]["step"] == 1
    shifted = [{**r, "reward/mean": r["reward/mean"] + 5.0} for r in base]
    out = compare(base, shifted)
    assert out["verdict"] == "different" and out["statistics"]["differing_metrics"] == ["reward/mean"]
    assert compare(base, base[:-1])["verdict"] == "different"  # a step missing
