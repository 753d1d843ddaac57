"""Reward faults on TRL's real reward path (the plain suite's shim test): a plugin that hangs, crashes
its worker, raises, returns the wrong number of scores or None costs its samples, not the run; each
step's metrics count the fault; on_error: fail stops the run with the plugin, the error and the row."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from rlbridge import hookimpl
from rlbridge.contract.registry import PluginManager, RewardPlugin
from rlbridge.run.loading import load_config
from rlbridge.run.runner import train
from tests.conftest import MINIMAL, write_config

# one fault per call, in this order; the call count lives in a file (calls land in different workers)
SCRIPT = ["hang", "crash", "raise", "wrong_length", "none"]


def chaos(state_dir: str):
    """Call n misbehaves as SCRIPT[n] (module level: spawned workers import it by path)."""

    def reward(inputs):
        path = Path(state_dir) / "calls"
        n = int(path.read_text()) if path.exists() else 0
        path.write_text(str(n + 1))
        kind = SCRIPT[n] if n < len(SCRIPT) else "ok"
        if kind == "hang":
            while True:
                pass
        if kind == "crash":
            os._exit(9)
        if kind == "raise":
            raise RuntimeError("chaos says no")
        if kind == "wrong_length":
            return [0.5]
        if kind == "none":
            return [None] * len(inputs)
        return [0.5] * len(inputs)

    return reward


def always_raises():
    def reward(inputs):
        raise KeyError("missing column 'tests'")

    return reward


class Plugins:
    @hookimpl
    def rlbridge_register_rewards(self):
        return [
            RewardPlugin("chaos", chaos, "misbehaves on purpose"),
            RewardPlugin("always_raises", always_raises, "raises"),
        ]


def _run(tmp_path, *overrides):
    pytest.importorskip("trl")
    pm = PluginManager()
    pm.register(Plugins(), "chaos_plugins")
    cfg = load_config(write_config(tmp_path, MINIMAL), [f"output_dir={tmp_path}/run", *overrides])
    return cfg, pm


def test_trl_run_survives_each_fault_and_counts_it_per_step(tmp_path):
    cfg, pm = _run(
        tmp_path,
        "training.steps=6",
        f"reward=[{{name: digit_match}}, {{name: chaos, args: {{state_dir: '{tmp_path}'}}}}]",
        "rollout_workers.timeout_s=3",
        "rollout_workers.batch_size=64",
        "rollout_workers.error_threshold=1.0",
    )
    started = time.monotonic()
    summary = train(cfg, pm, progress=False)
    assert summary["status"] == "completed"
    assert time.monotonic() - started < 240  # one 3 s timeout, not a hang
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    samples = 2 * 4  # batch_size x group_size: one call of each plugin per step
    # None next to digit_match's score is "not applicable", not a fault (None for every plugin would be)
    expected = [
        ("timeouts", samples),
        ("crashes", samples),
        ("errors", samples),
        ("invalid", samples),
        (None, 0),
        (None, 0),
    ]
    for row, (kind, n) in zip(rows, expected):
        faults = {k: row[f"reward/{k}"] for k in ("errors", "timeouts", "crashes", "nonfinite", "invalid")}
        assert faults == {k: (n if k == kind else 0) for k in faults}, (row["step"], faults)
        assert row["reward/digit_match/mean"] is not None  # the healthy plugin scored every step
    assert rows[-1]["reward/chaos/mean"] == 0.5
    log = [json.loads(line) for line in (tmp_path / "run" / "reward_faults.jsonl").read_text().splitlines()]
    assert {r["outcome"] for r in log} == {"timeouts", "crashes", "errors", "invalid"}
    assert any("chaos says no" in r["error"] for r in log) and all(r["row"].startswith('{"prompt"') for r in log)


def test_trl_on_error_fail_stops_the_run_naming_plugin_error_and_row(tmp_path):
    cfg, pm = _run(tmp_path, "reward=[{name: always_raises}]", "rollout_workers.on_error=fail")
    with pytest.raises(Exception) as info:
        train(cfg, pm, progress=False)
    msg = str(info.value)
    assert "reward 'always_raises'" in msg and "missing column 'tests'" in msg and '"prompt"' in msg
    assert "rollout_workers.on_error" in msg
    failure = json.loads((tmp_path / "run" / "summary.json").read_text())["failure"]
    assert failure["kind"] == "reward_faults" and not failure["retryable"], failure


def test_trl_reward_faults_over_the_threshold_fail_the_run_with_their_cause(tmp_path):
    """on_error: zero (the default) scores faults 0 until more than error_threshold of the samples
    scored so far (at least 16) faulted; then the run fails, its cause the plugin and the fraction."""
    cfg, pm = _run(
        tmp_path, "reward=[{name: digit_match}, {name: always_raises}]", "rollout_workers.error_threshold=0.25"
    )
    with pytest.raises(Exception, match="error_threshold"):
        train(cfg, pm, progress=False)
    failure = json.loads((tmp_path / "run" / "summary.json").read_text())["failure"]
    assert failure["kind"] == "reward_faults" and "always_raises" in failure["evidence"], failure
    # the pool counts each plugin's samples: always_raises faulted on 8 of the 16 scored in step 1
    assert "8 of 16 samples" in failure["evidence"], failure
    assert "rollout_workers.error_threshold above 0.50 (now 0.25)" in failure["hint"], failure
