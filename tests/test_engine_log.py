"""An engine that runs in the user's process (TRL here, as in `make demo`) writes its warnings, log lines
and progress bars to RUN_DIR/engine.log: the console shows rlbridge's own lines only."""

import json

import pytest

from conftest import QUICKSTART, run_cli

NOISY_REWARD = '''
import logging
import warnings

from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin


def noisy(**args):
    """Made in the engine's process when the run builds its rewards: says what engine libraries say."""
    warnings.warn("engine-side FutureWarning", FutureWarning)
    logging.getLogger("some_engine_library").warning("engine-side log line")
    from tqdm import tqdm

    for _ in tqdm(range(3), desc="engine-side progress"):
        pass
    return lambda inputs: [0.0 for _ in inputs]


@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("noisy", noisy, "warns, logs and draws a progress bar where it is built")]
'''


@pytest.mark.engine
@pytest.mark.parametrize("progress", [True, False])
def test_in_process_engine_output_goes_to_engine_log(tmp_path, progress):
    (tmp_path / "noisy_reward.py").write_text(NOISY_REWARD)
    out = tmp_path / "run"
    res = run_cli(
        "train",
        str(QUICKSTART),
        "-p",
        str(tmp_path / "noisy_reward.py"),
        *(() if progress else ("--no-progress",)),
        *("--set", "training.steps=2", "--set", f"output_dir={out}", "--set", "run_name=quiet"),
        *("--set", "reward=[{name: digit_match}, {name: noisy, weight: 0.0}]"),
        env={"RLBRIDGE_CACHE_DIR": str(tmp_path / "cache")},  # a first run: the builtin model is built too
    )
    assert res.returncode == 0, res.stderr
    console = res.stdout + res.stderr
    for noise in ("engine-side", "Warning", "Loading weights", "Writing model shards", "it/s]"):
        assert noise not in console, console
    assert res.stdout.startswith("done: 2 steps"), res.stdout
    assert ("quiet" in res.stderr) is progress  # the progress bar, rlbridge's own, stays on the console
    log = (out / "engine.log").read_text()
    for said in ("FutureWarning: engine-side FutureWarning", "engine-side log line", "engine-side progress"):
        assert said in log, log
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
