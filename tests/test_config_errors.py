"""Every bad input gives one clear error naming the field and the fix, exit code 2, no traceback,
and nothing written."""

import pytest

from tests.conftest import MINIMAL, requirement_unmet_by_backend, run_cli, write_config


def _fails(tmp_path, text, *extra, expect):
    cfg = write_config(tmp_path, text)
    out_dir = tmp_path / "out"
    res = run_cli("train", str(cfg), "--set", f"output_dir={out_dir}", *extra)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    for fragment in expect:
        assert fragment in res.stderr, res.stderr
    assert not out_dir.exists(), "a failed pre-flight must write nothing"
    return res


def test_yaml_syntax_error_has_line_number(tmp_path):
    _fails(
        tmp_path, "backend: trl\nmodel:\n  path: [unclosed\nreward: []\n", expect=["YAML syntax error", "cfg.yaml:4"]
    )


def test_unknown_key_did_you_mean(tmp_path):
    _fails(tmp_path, MINIMAL + "trainig: {steps: 3}\n", expect=["unknown key 'trainig'", "did you mean 'training'"])


def test_unknown_nested_key_did_you_mean(tmp_path):
    text = MINIMAL.replace("algorithm: {group_size: 4}", "algorithm: {group_size: 4, kl_coeff: 0.1}")
    _fails(tmp_path, text, expect=["unknown key 'kl_coeff' in algorithm", "did you mean 'kl_coef'"])


def test_override_typo_did_you_mean(tmp_path):
    _fails(tmp_path, MINIMAL, "--set", "training.stepz=3", expect=["unknown key 'stepz'", "did you mean 'steps'"])


def test_wrong_type(tmp_path):
    _fails(tmp_path, MINIMAL, "--set", "training.lr=fast", expect=["training.lr", "'fast'"])


def test_out_of_range(tmp_path):
    _fails(tmp_path, MINIMAL, "--set", "rollout.top_p=1.5", expect=["rollout.top_p", "less than or equal to 1"])


def test_unknown_backend_lists_available(tmp_path):
    from rlbridge.contract.registry import get_plugin_manager

    available = ", ".join(sorted(get_plugin_manager().items["backend"]))  # every registered backend, in order
    _fails(
        tmp_path,
        MINIMAL,
        "--set",
        "backend=trll",
        expect=["unknown backend 'trll'", "did you mean 'trl'", f"available: {available}"],
    )


def test_unknown_reward_plugin_lists_available(tmp_path):
    _fails(
        tmp_path,
        MINIMAL,
        "--set",
        "reward=[{name: digit_mach}]",
        expect=["reward[0].name", "digit_mach", "available:", "digit_match"],
    )


def test_missing_model_path(tmp_path):
    _fails(tmp_path, MINIMAL, "--set", f"model.path={tmp_path}/nope", expect=["model.path", "does not exist"])


def test_group_size_below_two_for_grpo(tmp_path):
    _fails(
        tmp_path,
        MINIMAL,
        "--set",
        "algorithm.group_size=1",
        expect=["group_size is 1", "set algorithm.group_size to 2 or more"],
    )


def test_batch_not_divisible_by_group_size(tmp_path):
    _fails(
        tmp_path,
        MINIMAL,
        "--set",
        "training.mini_batch_size=6",
        expect=["mini_batch_size (6) is not divisible by algorithm.group_size (4)"],
    )


def test_rejected_knob_names_knob_backend_and_alternative(tmp_path):
    _fails(
        tmp_path,
        MINIMAL,
        "--set",
        "algorithm.name=ppo",
        expect=["backend 'trl' cannot honour algorithm.name=ppo", "backend: verl"],
    )


def test_several_nodes_run_here_name_the_launcher_that_starts_one_process_per_node(tmp_path):
    _fails(
        tmp_path,
        MINIMAL,
        "--set",
        "resources.nodes=2",
        expect=["resources.nodes (2)", "rlbridge submit --to slurm", "resources.nodes: 1"],
    )


def test_backend_options_cannot_shadow_a_canonical_knob(tmp_path):
    _fails(
        tmp_path,
        MINIMAL,
        "--set",
        "backend_options.trl.learning_rate=0.1",
        expect=["backend_options.trl.learning_rate", "training.lr"],
    )


def test_debug_shows_traceback(tmp_path):
    cfg = write_config(tmp_path, MINIMAL)
    res = run_cli("--debug", "plan", str(cfg), "--set", "algorithm.group_size=1")
    assert res.returncode == 2
    assert "Traceback" in res.stderr


STEPS_AND_EPOCHS = MINIMAL.replace(
    "training: {steps: 2, batch_size: 2, lr: 5.0e-3}", "training:\n  steps: 3\n  epochs: 2\n"
)


def _one_stop_condition() -> list[str]:
    """The backends whose capability table refuses steps and epochs together (one stop condition)."""
    import yaml

    refused = requirement_unmet_by_backend(yaml.safe_load(STEPS_AND_EPOCHS), "training.epochs")
    return [backend for backend, why in refused.items() if why]


@pytest.mark.parametrize("backend", _one_stop_condition())
def test_steps_and_epochs_together_refused_where_one_stop_condition(tmp_path, backend):
    """Steps and epochs together mean "whichever comes first" (verl's total_training_steps beside
    total_epochs); a backend with one stop condition refuses the pair, not half-honoured, in one clear line."""
    _fails(
        tmp_path,
        STEPS_AND_EPOCHS,
        "--set",
        f"backend={backend}",
        expect=["training.steps (3) and training.epochs (2)", "whichever comes first", "set one of them to null"],
    )


def test_steps_and_epochs_together_on_verl_set_both_stop_conditions(tmp_path):
    cfg = write_config(tmp_path, STEPS_AND_EPOCHS)
    res = run_cli("plan", str(cfg), "--set", "backend=verl")
    assert res.returncode == 0, res.stderr
    assert "trainer.total_training_steps=3" in res.stdout and "trainer.total_epochs=2" in res.stdout, res.stdout


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["algorithm.name=dr_grpo"],
        ["training.epochs=2", "training.steps=null"],
        ["algorithm.rollout_correction=token_truncate"],
        ["backend=verl"],
    ],
)
def test_a_dumped_resolved_config_loads_again(extra):
    """config.yaml of a run (and what rlbridge submit and the engine child receive) is the whole
    resolved config, defaults included: it must validate again exactly as written."""
    import yaml

    from rlbridge.run.loading import dump_config, load_config, validate_config
    from rlbridge.run.runner import resolve
    from tests.conftest import QUICKSTART

    config = resolve(load_config(QUICKSTART, extra))
    assert validate_config(yaml.safe_load(dump_config(config))) == config
