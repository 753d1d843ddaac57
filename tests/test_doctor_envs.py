"""`rlbridge doctor` on a machine whose engine is not installed in rlbridge's own environment but in an
engine environment (`rlbridge env list`): it names the ready environments and the one engine_env: auto runs."""

import re

from tests.conftest import run_cli


def _env(cache, name, complete):
    path = cache / "envs" / name
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    if complete:  # what `rlbridge env create` stamps last (rlbridge.engine.environments.is_complete)
        (path / ".rlbridge").mkdir()
        (path / ".rlbridge" / "rlbridge.done").write_text("")
    return path


def test_doctor_names_the_ready_engine_environments(tmp_path):
    cache = tmp_path / "cache"
    ready = _env(cache, "verl-0.9.1", complete=True)
    _env(cache, "verl-0.5.0", complete=False)  # half created: not ready
    res = run_cli("doctor", env={"RLBRIDGE_CACHE_DIR": str(cache)})
    assert res.returncode == 0, res.stderr
    flat = re.sub(r"[│┃\s]+", " ", res.stdout)
    assert f"backend verl not installed here; engine environment ready: 0.9.1 ({ready}); " in flat, flat
    assert "engine_env: auto runs verl 0.9.1 there" in flat and "0.5.0" not in flat
    assert "backend openrlhf not installed here (`rlbridge env create openrlhf`" in flat
