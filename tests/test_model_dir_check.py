"""A model directory that is not a model fails before any engine starts, in `plan` and in `train`, on
every backend, with one line naming what is missing and exit code 2: the four ways a user gets it wrong
(an empty directory, a file, config + tokenizer without weights, weights without a tokenizer), and the
same for the critic's, a reward model's and the reference model's paths. Nothing loads the weights."""

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import QUICKSTART, registered_backends, run_cli

BACKENDS = registered_backends()


@pytest.fixture(scope="module")
def tiny():
    """The builtin tiny model's directory (config.json, model.safetensors, tokenizer.json...)."""
    from rlbridge.contract.models import materialize_path

    return Path(materialize_path("builtin:tiny-digits", "model.path"))


def _broken(tmp_path, tiny, case):
    """A directory (or file) broken the way `case` says, and what the error must name."""
    target = tmp_path / case
    if case == "a_file":
        target.write_text("not a model\n")
        return target, "is a file, not a model directory"
    target.mkdir()
    if case == "empty":
        return target, "has no config.json, so it is not a model directory (it is empty)"
    keep = {
        "no_weights": ("config.json", "tokenizer.json", "tokenizer_config.json"),
        "no_tokenizer": ("config.json", "model.safetensors", "generation_config.json"),
    }[case]
    for name in keep:
        shutil.copy(tiny / name, target / name)
    return target, {"no_weights": "has config.json but no weights", "no_tokenizer": "has no tokenizer files"}[case]


def _one_line_exit_2(res, *fragments):
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["empty", "a_file", "no_weights", "no_tokenizer"])
@pytest.mark.parametrize("command", ["plan", "train"])
def test_a_directory_that_is_not_a_model_is_one_line(tmp_path, tiny, backend, case, command):
    path, says = _broken(tmp_path, tiny, case)
    out = tmp_path / "run"
    res = run_cli(
        command,
        str(QUICKSTART),
        "--set",
        f"backend={backend}",
        "--set",
        f"model.path={path}",
        "--set",
        f"output_dir={out}",
    )
    _one_line_exit_2(res, f"model.path: '{path}' {says}")
    assert not out.exists(), "the check runs before anything is written or started"


def test_the_tiny_model_itself_plans_and_a_sharded_copy_too(tmp_path, tiny):
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    for item in tiny.iterdir():
        if item.name != "model.safetensors":
            shutil.copy(item, sharded / item.name)
    shutil.copy(tiny / "model.safetensors", sharded / "model-00001-of-00002.safetensors")
    shutil.copy(tiny / "model.safetensors", sharded / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    for path in (tiny, sharded):
        res = run_cli("plan", str(QUICKSTART), "--set", f"model.path={path}")
        assert res.returncode == 0, res.stderr
    (sharded / "model-00002-of-00002.safetensors").unlink()
    res = run_cli("plan", str(QUICKSTART), "--set", f"model.path={sharded}")
    _one_line_exit_2(res, "model.safetensors.index.json names 1 shard(s) that are not there: model-00002-of-00002")


def test_an_architecture_transformers_does_not_know_is_named(tmp_path, tiny):
    model = tmp_path / "unknown"
    shutil.copytree(tiny, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "qwen22"}))
    res = run_cli("plan", str(QUICKSTART), "--set", f"model.path={model}")
    _one_line_exit_2(res, "model_type 'qwen22', which transformers", "does not know", "did you mean 'qwen2'")
    (model / "config.json").write_text("{not json")
    _one_line_exit_2(run_cli("plan", str(QUICKSTART), "--set", f"model.path={model}"), "is not readable JSON")


def test_known_model_types_are_transformers_config_mapping_names():
    """Read from transformers' source without importing it (it imports torch), equal to what it exports."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from rlbridge.contract.models import known_model_types, transformers_in

    assert transformers_in(None) is not None and str(transformers_in(None)) in transformers.__file__
    assert known_model_types(transformers_in(None)) == set(CONFIG_MAPPING_NAMES)


@pytest.mark.parametrize(
    "field, config, sets, tokenizer",
    [
        ("critic.path", QUICKSTART, ["backend=verl", "algorithm.name=ppo", "critic.path={path}"], False),
        ("reward[0].model", QUICKSTART, ["reward=[{{model: {path}}}]"], True),
        ("offline.reference_model", QUICKSTART.parent / "dpo.yaml", ["offline.reference_model={path}"], False),
    ],
)
def test_the_other_models_are_checked_too(tmp_path, tiny, field, config, sets, tokenizer):
    for case in ("no_weights", "no_tokenizer"):
        path, says = _broken(tmp_path, tiny, case)
        res = run_cli("plan", str(config), *(a for s in sets for a in ("--set", s.format(path=path))))
        if case == "no_tokenizer" and not tokenizer:  # the run loads no tokenizer from this directory
            assert res.returncode == 0, res.stderr
            continue
        _one_line_exit_2(res, f"{field}: '{path}' {says}")


@pytest.mark.parametrize("command", ["plan", "train"])
@pytest.mark.parametrize("field", ["model.path", "data.train.path"])
def test_a_path_too_long_for_the_file_system_is_one_line(tmp_path, command, field):
    long = str(tmp_path / ("a" * 300))
    setting = f"model.path={long}" if field == "model.path" else f"data.train={{type: jsonl, path: {long}}}"
    res = run_cli(command, str(QUICKSTART), "--set", setting, "--set", f"output_dir={tmp_path}/run")
    _one_line_exit_2(res, f"{field}: '", "is not a path this file system can look up (File name too long)")
