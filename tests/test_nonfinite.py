"""Non-finite values (NaN, inf) are surfaced: metrics.jsonl records them as null and names them
in `nonfinite`, hooks receive them, the console says so, and training.on_nonfinite decides whether
the run fails (after training.nonfinite_steps consecutive steps) or goes on with a warning."""

import json
import math
from pathlib import Path

import pytest

from rlbridge import hookimpl
from rlbridge.contract.metrics import clean, nonfinite
from rlbridge.contract.registry import PluginManager, RewardPlugin
from rlbridge.run.loading import load_config
from rlbridge.run.runner import prepare, train
from rlbridge.run.runtime import NonFiniteError, RunContext
from tests.conftest import MINIMAL, write_config


def test_clean_keeps_non_finite_canonical_values():
    metrics = {
        "loss/policy": float("nan"),
        "grad_norm": float("inf"),
        "lr": 1e-3,
        "not_canonical": float("nan"),
        "x": "text",
    }
    kept = clean(metrics)
    assert set(kept) == {"loss/policy", "grad_norm", "lr"}
    assert math.isnan(kept["loss/policy"]) and kept["grad_norm"] == math.inf
    assert nonfinite(kept) == ["grad_norm", "loss/policy"]


class StepHook:
    def __init__(self):
        self.seen = []

    @hookimpl
    def rlbridge_step_end(self, step, metrics):
        self.seen.append((step, dict(metrics)))


def _context(tmp_path, *overrides):
    prepared = prepare(load_config(write_config(tmp_path, MINIMAL), [f"output_dir={tmp_path}/run", *overrides]))
    run_dir = Path(prepared.config.output_dir)
    run_dir.mkdir(parents=True)
    pm = PluginManager()
    hook = StepHook()
    pm.register(hook, "hook")
    return RunContext(prepared.config, prepared.plan, run_dir, pm, []), hook, run_dir


def test_metrics_jsonl_records_null_and_names_and_hooks_see_the_value(tmp_path, capsys):
    ctx, hook, run_dir = _context(tmp_path, "training.on_nonfinite=warn")
    ctx.emit_step(1, {"loss/policy": 0.5, "reward/mean": 0.25})
    ctx.emit_step(2, {"loss/policy": float("nan"), "reward/mean": 0.25, "grad_norm": float("-inf")})
    ctx.emit_step(3, {"loss/policy": 0.4, "reward/mean": 0.5})
    ctx.close()
    text = (run_dir / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON, readable by any tool
    rows = [json.loads(line) for line in text.splitlines()]
    assert rows[1] == {
        "step": 2,
        "loss/policy": None,
        "reward/mean": 0.25,
        "grad_norm": None,
        "nonfinite": ["grad_norm", "loss/policy"],
    }
    assert "nonfinite" not in rows[0] and "nonfinite" not in rows[2]
    step, seen = hook.seen[1]
    assert step == 2 and math.isnan(seen["loss/policy"]) and seen["grad_norm"] == -math.inf
    assert ctx.nonfinite_steps == [2]
    err = capsys.readouterr().err
    assert "step 2" in err and "loss/policy" in err and "non-finite" in err


def test_fail_policy_stops_after_the_configured_consecutive_steps(tmp_path):
    ctx, hook, run_dir = _context(tmp_path, "training.nonfinite_steps=2")
    ctx.emit_step(1, {"loss/policy": float("nan")})
    ctx.emit_step(2, {"loss/policy": 0.1})  # the streak is broken
    ctx.emit_step(3, {"loss/policy": float("nan")})
    with pytest.raises(NonFiniteError) as info:
        ctx.emit_step(4, {"loss/policy": float("inf")})
    ctx.close()
    assert "training.on_nonfinite" in str(info.value) and "step 4" in str(info.value)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # the failing step is recorded before the run stops
    assert [s for s, _ in hook.seen] == [1, 2, 3, 4]


class NaNOnThirdCall:
    """A reward plugin that returns NaN for every sample on its third call."""

    def __init__(self):
        self.calls = 0

    @hookimpl
    def rlbridge_register_rewards(self):
        def factory(**args):
            def reward(inputs):
                self.calls += 1
                return [float("nan") if self.calls == 3 else 0.5 for _ in inputs]

            return reward

        return [RewardPlugin("nan_third", factory, "NaN on the third call")]


def _nan_run(tmp_path, *overrides):
    pytest.importorskip("trl")
    plugin, hook = NaNOnThirdCall(), StepHook()
    pm = PluginManager()
    pm.register(plugin, "nan_third")
    pm.register(hook, "hook")
    cfg = load_config(
        write_config(tmp_path, MINIMAL),
        [
            f"output_dir={tmp_path}/run",
            "training.steps=5",
            "reward=[{name: digit_match}, {name: nan_third}]",
            *overrides,
        ],
    )
    return cfg, pm, hook


@pytest.mark.engine
def test_a_nan_reward_on_trl_fails_the_run_by_default(tmp_path):
    cfg, pm, hook = _nan_run(tmp_path)
    with pytest.raises(NonFiniteError, match="reward/nan_third/mean"):
        train(cfg, pm, progress=False)
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[2]["reward/nan_third/mean"] is None and rows[2]["reward/mean"] is None
    assert "reward/nan_third/mean" in rows[2]["nonfinite"]
    assert all(r["reward/nan_third/mean"] == 0.5 for r in rows[:2])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and "training.on_nonfinite" in summary["error"]
    assert summary["nonfinite_steps"] == [3]
    failure = summary["failure"]  # the cause (rlbridge.diagnosis.causes): a reward's NaN, not the learning rate
    assert failure["kind"] == "nonfinite" and not failure["retryable"], failure
    assert (
        failure["hint"].startswith("a reward plugin returned NaN/inf (") and "reward/nan_third/mean" in failure["hint"]
    ), failure


@pytest.mark.engine
def test_a_nan_reward_on_trl_with_warn_is_recorded_and_the_run_goes_on(tmp_path):
    cfg, pm, hook = _nan_run(tmp_path, "training.on_nonfinite=warn", "training.steps=4")
    summary = train(cfg, pm, progress=False)
    assert summary["status"] == "completed" and summary["nonfinite_steps"] == [3]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[2]["reward/nan_third/mean"] is None and "nonfinite" not in rows[3]
    assert math.isnan(dict(hook.seen)[3]["reward/nan_third/mean"])
