"""OpenEnv as an optional-extra environment plugin: the run starts the environment's server as a
local process, plays one session per episode (rewards from the server's own code) and stops it."""

import json
import re
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openenv.core")

from rlbridge.run.loading import load_config  # noqa: E402
from rlbridge.run.runner import train  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.engine
def test_openenv_server_drives_two_trl_steps_and_is_stopped(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the example's server path is relative to the repository root
    config = load_config(
        REPO / "examples" / "openenv.yaml", [f"output_dir={tmp_path}/run", "training.steps=2", "training.batch_size=2"]
    )
    summary = train(config, progress=False)
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("reward/openenv/mean" in r for r in rows)
    episodes = [json.loads(line) for line in (tmp_path / "run" / "trl_events.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 * 2 * 4 and all(0.0 <= e["total"] <= 1.0 for e in episodes)
    log = (tmp_path / "run" / "openenv_server.log").read_text()
    assert "WebSocket" in log or "/ws" in log  # sessions, not the per-request HTTP endpoints
    port = re.search(r"http://127\.0\.0\.1:(\d+)", log).group(1)
    assert "Finished server process" in log
    with pytest.raises(OSError):  # stopped with the run
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
