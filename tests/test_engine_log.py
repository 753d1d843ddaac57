"""An engine that runs in the user's process (TRL here, as in `make demo`) writes its warnings, log lines
and progress bars to RUN_DIR/engine.log: the console shows rlbridge's own lines only."""

import json

import pytest

from tests.conftest import QUICKSTART, run_cli

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


def test_a_stream_kept_from_one_engine_run_does_not_break_the_next(tmp_path):
    """A pipeline runs its stages' engines here one after another. Whoever kept the first block's stream and
    puts it back later (rich's Live, redirecting stderr, restores what it found when it started) leaves
    sys.stderr on it: the next block and the handlers on it must write on, not to a closed log."""
    import logging
    import sys

    from rlbridge.run.engine_log import engine_output_to

    logger = logging.getLogger("library_imported_by_stage_one")
    before = sys.stderr
    try:
        with engine_output_to(tmp_path / "one.log"):
            kept = sys.stderr
            logger.warning("said in stage one")
        sys.stderr = kept
        handler = logging.StreamHandler()  # on sys.stderr: the kept stream
        logger.addHandler(handler)
        with engine_output_to(tmp_path / "two.log"):
            logger.warning("said in stage two")
        kept.write("after both\n")
        kept.flush()
    finally:
        sys.stderr = before
        logger.handlers.clear()
    assert "said in stage two" in (tmp_path / "two.log").read_text()
