"""`data.*.type: hf`: a dataset datasets.load_dataset loads by name, through the user's Hugging Face
cache and offline mode. No hub is reachable here, so a hub id is served from a cache datasets itself
wrote (the state a user's earlier online load leaves), and a local dataset directory goes through the
same load_dataset call."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MINIMAL, run_cli, write_config

pytest.importorskip("datasets")

HUB_ID = "acme/digits"


def _dataset_dir(tmp_path) -> Path:
    """A local dataset directory in a hub dataset's layout: a train split of 3s and a test split of 7s,
    so that the rows a run trains on show which split it read."""
    root = tmp_path / "digits"
    (root / "data").mkdir(parents=True)
    for split, digit in (("train", "3"), ("test", "7")):
        rows = [{"prompt": digit * 4, "answer": digit, "row": i} for i in range(16)]
        (root / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _hub_cache(tmp_path) -> Path:
    """An HF_HOME whose datasets cache holds HUB_ID as an online load_dataset leaves it: datasets builds
    the local directory's cache, which is then filed under the hub id's name (org___name/...)."""
    home = tmp_path / "hf_home"
    source = _dataset_dir(tmp_path)
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_DATASETS_CACHE", None)
    subprocess.run(
        [sys.executable, "-c", f"import datasets; datasets.load_dataset({str(source)!r})"],
        env=env,
        check=True,
        capture_output=True,
    )
    built = next(p for p in (home / "datasets" / source.name).glob("default/0.0.0/*") if p.is_dir())
    target = home / "datasets" / HUB_ID.replace("/", "___") / "default" / "0.0.0" / built.name
    shutil.copytree(built, target, ignore=shutil.ignore_patterns("*.lock"))
    for arrow in target.glob("*.arrow"):  # the builder's name is the hub id's name
        arrow.rename(target / arrow.name.replace(source.name, HUB_ID.split("/")[1], 1))
    return home


def _hf_env(home: Path) -> dict[str, str]:
    return {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(home / "datasets")}


def test_fields_are_checked_where_declared():
    from pydantic import ValidationError

    from rlbridge.contract.config import DataSource

    source = DataSource(type="hf", name="openai/gsm8k", config="main", split="test", revision="v1")
    assert (source.name, source.config, source.split, source.revision) == ("openai/gsm8k", "main", "test", "v1")
    for bad, says in (
        ({"type": "hf"}, "needs 'name'"),
        ({"type": "hf", "name": "a/b", "path": "x"}, "takes 'name', not 'path'"),
        ({"type": "jsonl", "path": "x.jsonl", "config": "main"}, "only for type 'hf'"),
        ({"type": "hf", "name": "a/b", "args": {"n": 1}}, "'args' is only for type 'generator'"),
    ):
        with pytest.raises(ValidationError, match=says):
            DataSource(**bad)


def test_local_dataset_directory_loads_the_split_asked_for(tmp_path):
    from rlbridge.contract.config import DataSource
    from rlbridge.contract.data import load_rows
    from rlbridge.run.loading import load_config

    config = load_config(write_config(tmp_path, MINIMAL), [])
    root = _dataset_dir(tmp_path)
    rows = load_rows(DataSource(type="hf", name=str(root), split="test", limit=5), config, "data.train")
    assert [r["prompt"] for r in rows] == ["7777"] * 5 and [r["row"] for r in rows] == [0, 1, 2, 3, 4]
    assert {r["prompt"] for r in load_rows(DataSource(type="hf", name=str(root)), config, "data.train")} == {"3333"}


def test_plan_names_a_missing_local_directory_a_wrong_split_and_config(tmp_path):
    cfg = write_config(tmp_path, MINIMAL)
    root = _dataset_dir(tmp_path)
    res = run_cli("plan", str(cfg), "--set", f"data.train={{type: hf, name: {tmp_path}/nowhere}}")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "data.train.name:" in res.stderr and "does not exist" in res.stderr
    res = run_cli("plan", str(cfg), "--set", f"data.train={{type: hf, name: {root}, config: nope}}")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "data.train.config:" in res.stderr and "'nope'" in res.stderr
    res = run_cli("plan", str(cfg), "--set", f"data.train={{type: hf, name: {root}, split: test}}")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("command", ["plan", "train"])
def test_offline_with_an_uncached_hub_id_is_one_line(tmp_path, command):
    cfg = write_config(tmp_path, MINIMAL)
    home = tmp_path / "empty_hf_home"
    env = {**_hf_env(home), "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "1"}
    out = tmp_path / "out"
    res = run_cli(
        command,
        str(cfg),
        "--set",
        "data.train={type: hf, name: acme/not-cached}",
        "--set",
        f"output_dir={out}",
        env=env,
    )
    assert res.returncode == 2, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "data.train.name: 'acme/not-cached' is not in the Hugging Face cache" in lines[0]
    assert "HF_DATASETS_OFFLINE=1" in lines[0]
    assert not out.exists()


def test_a_cached_hub_id_plans_offline_and_an_unknown_config_is_named(tmp_path):
    cfg = write_config(tmp_path, MINIMAL)
    env = _hf_env(_hub_cache(tmp_path))
    res = run_cli("plan", str(cfg), "--set", f"data.train={{type: hf, name: {HUB_ID}, split: test}}", env=env)
    assert res.returncode == 0, res.stderr
    res = run_cli("plan", str(cfg), "--set", f"data.train={{type: hf, name: {HUB_ID}, config: other}}", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "data.train.config:" in res.stderr


@pytest.mark.engine
def test_trl_trains_on_the_hub_split_from_the_users_cache(tmp_path):
    """A real TRL run on a hub id, offline, from the user's cache: every prompt it sampled is from the
    test split asked for (7s), none from train (3s)."""
    cfg = write_config(tmp_path, MINIMAL)
    out = tmp_path / "run"
    res = run_cli(
        "train",
        str(cfg),
        "--no-progress",
        "--set",
        f"data.train={{type: hf, name: {HUB_ID}, split: test}}",
        "--set",
        f"output_dir={out}",
        env=_hf_env(_hub_cache(tmp_path)),
    )
    assert res.returncode == 0, res.stderr
    prompts = {json.loads(line)["prompt"] for line in (out / "samples.jsonl").read_text().splitlines()}
    assert prompts == {"7777"}, prompts
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"]["data.train"]["source"] == {"type": "hf", "name": HUB_ID, "split": "test", "args": {}}
    assert manifest["data"]["data.train"]["rows"] == 16
