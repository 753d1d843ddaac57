"""SIGKILL of the user's `rlbridge train` mid-run: the engine process tree stops within seconds, the
run directory says the run was killed, and `rlbridge train CONFIG --resume` continues from the last
complete checkpoint with metrics identical to an uninterrupted run's (TRL on CPU, the engine in its
own process as with any engine environment)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MINIMAL, write_config

pytest.importorskip("trl")

# what must be identical between the uninterrupted and the killed-then-resumed run (timings may differ)
COMPARED = ("reward/mean", "reward/std", "reward/digit_match/mean", "loss/policy", "grad_norm", "entropy", "lr",
            "response_length/mean")
STEPS = 5


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:].split()[0] != b"Z"


def _train(cfg, run_dir, *extra):
    """`rlbridge train` as a user runs it, with the engine in its own process (engine_env: a venv)."""
    return subprocess.Popen(
        [sys.executable, "-m", "rlbridge", "train", str(cfg), "--no-progress", "--set", f"output_dir={run_dir}",
         "--set", f"engine_env={sys.prefix}", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _rows(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.engine
def test_sigkill_mid_run_stops_the_engine_and_resume_matches_an_uninterrupted_run(tmp_path):
    cfg = write_config(tmp_path, MINIMAL.replace("steps: 2", f"steps: {STEPS}") + "checkpoint: {interval: 1}\n")
    reference = _train(cfg, tmp_path / "ref")
    out, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, out[-3000:]

    run = tmp_path / "killed"
    proc = _train(cfg, run)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").exists() and len(_rows(run)) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    engine = int((run / "engine.pid").read_text())
    from rlbridge.engine.lifeline import descendants

    tree = [engine, *descendants(engine)]
    proc.send_signal(signal.SIGKILL)  # the user's process dies mid-step; nobody cleans up for it
    proc.wait()
    killed_at = time.time()
    while time.time() - killed_at < 10 and any(_alive(p) for p in tree):
        time.sleep(0.1)
    assert not any(_alive(p) for p in tree), f"engine processes left after the parent's SIGKILL: {[p for p in tree if _alive(p)]}"
    stopped_s = time.time() - killed_at
    state = json.loads((run / "run_state.json").read_text())
    assert state["status"] == "killed", state
    assert not (run / "summary.json").exists()

    resumed = _train(cfg, run, "--resume")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert "was killed" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["previous_run"]["status"] == "killed"
    rows, ref = _rows(run), _rows(tmp_path / "ref")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # each step once, none lost, none twice
    for got, want in zip(rows, ref):
        for key in COMPARED:
            assert got.get(key) == want.get(key), (got["step"], key, got.get(key), want.get(key))
    print(f"engine tree of {len(tree)} processes stopped {stopped_s:.1f} s after the SIGKILL")


def test_a_half_written_checkpoint_is_never_used(tmp_path):
    from rlbridge_adapters.trl.train import _latest_checkpoint, mark_complete

    for step in (1, 2, 3):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_text("x")
    mark_complete(tmp_path / "checkpoint-1", 1)
    mark_complete(tmp_path / "checkpoint-2", 2)
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text('{"global_st')  # killed while saving
    assert _latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")
    mark_complete(tmp_path / "checkpoint-3", 3)
    assert _latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-3")
