"""Engine-native reward functions are resolved where they will run: in the engine environment the
backend runs in (engine_env: auto), not in the user's process, which has only rlbridge. verl's built-in
scorer, as `rlbridge import` writes it for a verl recipe with no custom reward, plans from this venv
(which has no verl) against verl's environment; on OpenRLHF, whose environment lacks verl, the error names
the package to add."""

import importlib.util

import pytest

from tests.conftest import run_cli, write_config

SCORER = "verl.utils.reward_score:default_compute_score"
CONFIG = f"""\
backend: verl
model: {{path: builtin:tiny-digits}}
reward: [{{native: verl, function: "{SCORER}"}}]
training: {{steps: 2, batch_size: 2, lr: 5.0e-3}}
algorithm: {{group_size: 4}}
rollout: {{max_new_tokens: 8}}
resources: {{gpus_per_node: 0}}
"""

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("verl") is not None, reason="needs a process without verl (the user's own)"
)


def _env(user_engine_envs, name):
    from rlbridge.engine.environments import is_complete

    path = user_engine_envs / name
    if not is_complete(path):
        pytest.skip(f"no complete {name} engine environment here")
    return path


@pytest.mark.engine_env
def test_verl_scorer_plans_against_verls_environment(tmp_path, user_engine_envs):
    _env(user_engine_envs, "verl-0.9.1")
    res = run_cli("plan", str(write_config(tmp_path, CONFIG)))
    assert res.returncode == 0, res.stderr
    assert "reward" in res.stdout
    # a name verl's module lacks is named from verl's environment
    res = run_cli("plan", str(write_config(tmp_path, CONFIG.replace("default_compute_score", "no_such_scorer"))))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "reward[0].function: verl.utils.reward_score has no 'no_such_scorer'" in res.stderr
    assert "default_compute_score" in res.stderr  # the callables there, as verl's environment lists them


@pytest.mark.engine_env
def test_verl_scorer_on_openrlhf_names_the_package_to_add(tmp_path, user_engine_envs):
    env = _env(user_engine_envs, "openrlhf-0.11.2")
    res = run_cli("plan", str(write_config(tmp_path, CONFIG)), "--set", "backend=openrlhf")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"reward[0].function: {SCORER} needs module 'verl'" in line
    assert f"not installed in the engine environment ({env}" in line or "openrlhf-0.11.2" in line
    assert "add the package 'verl'" in line


def test_engine_here_checks_here_naming_the_package(tmp_path):
    """TRL runs in this process: the scorer is resolved here, and verl is not installed here."""
    res = run_cli("plan", str(write_config(tmp_path, CONFIG)), "--set", "backend=trl")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "needs module 'verl', which is not installed in this Python" in res.stderr
    assert "add the package 'verl'" in res.stderr


def test_without_the_engine_environment_it_asks_for_it(tmp_path):
    """A cache with no engine environment: the scorer cannot be resolved where it runs."""
    res = run_cli("plan", str(write_config(tmp_path, CONFIG)), env={"RLBRIDGE_CACHE_DIR": str(tmp_path / "cache")})
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "there is none to check it in" in res.stderr and "rlbridge env create verl==0.9.1" in res.stderr


def test_a_function_this_process_loads_plans_without_the_engine_environment(tmp_path):
    (tmp_path / "scores.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    )
    text = CONFIG.replace(SCORER, f"{tmp_path}/scores.py:compute_score")
    res = run_cli("plan", str(write_config(tmp_path, text)), env={"RLBRIDGE_CACHE_DIR": str(tmp_path / "cache")})
    assert res.returncode == 0, res.stderr
