"""The engines' own launch scripts and configs (tests/fixtures/recipes/real/, vendored with their source and
commit in SOURCE.md) import without editing, and every malformed recipe is one line naming the file, the
line and the problem, exit 2."""

import subprocess
import sys
from pathlib import Path

import pytest

from rlbridge.errors import ConfigError
from rlbridge.importer.recipe_import import import_recipe
from rlbridge.importer.solver import recipe_view, resolve_config

REAL = Path(__file__).parent / "fixtures" / "recipes" / "real"
# OpenRLHF's examples at v0.11.0 use --algo.advantage.is_correction_enable, which 0.11.2 renamed: they are read as 0.11.0
VERSIONS = {"openrlhf": "0.11.0"}
# what the reader cannot know and bash would: verl's grpo script asks $(python3 -c 'import torch_npu') for DEVICE
ENV = {"DEVICE": "gpu"}
REFUSED = {  # a recipe rlbridge cannot run as written: one line, with its line and what to do
    # written for verl 0.9.0 (its grad_offload, which 0.9.1 folded into param_offload); imports as 0.9.0:
    # tests/test_import_verl_layout.py
    "verl/grpo_qwen3_30b_a3b_megatron.sh": ("megatron.sh:155: unknown verl 0.9.1 key", "grad_offload"),
}
# CI imports these (one per kind of script, each 10-60 s on 2 cores); `make compat` (matrix_only) imports every one
IN_CI = {
    "verl/gsm8k_example.sh",
    "verl/lora_qwen3_8b_fsdp.sh",
    "verl/grpo_qwen3_30b_a3b_megatron.sh",
    "openrlhf/train_ppo_ray_hybrid_engine.sh",
    "trl/dr_grpo_config.py",
}
RECIPES = [
    pytest.param(
        p,
        id=f"{p.parent.name}/{p.name}",
        marks=[] if f"{p.parent.name}/{p.name}" in IN_CI else [pytest.mark.matrix_only],
    )
    for p in sorted(REAL.glob("*/*"))
    if p.suffix in (".sh", ".py", ".yaml")
]


_RESULTS: dict = {}


def _imported(path, monkeypatch):
    """One import per recipe for the tests below (each takes 10-30 s on 2 cores)."""
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    if path not in _RESULTS:
        _RESULTS[path] = import_recipe(str(path), path.parent.name, VERSIONS.get(path.parent.name))
    return _RESULTS[path]


@pytest.mark.parametrize("path", RECIPES)
def test_real_recipe_imports_without_editing(path, monkeypatch):
    engine = path.parent.name
    name = f"{engine}/{path.name}"
    if name in REFUSED:
        for k, v in ENV.items():
            monkeypatch.setenv(k, v)
        with pytest.raises(ConfigError) as exc:
            import_recipe(str(path), engine, VERSIONS.get(engine))
        where, hint = REFUSED[name]
        assert where in str(exc.value) and hint in str(exc.value) and "\n" not in str(exc.value)
        return
    result = _imported(path, monkeypatch)
    assert result.entries, name
    lines = len(path.read_text().splitlines())
    for e in result.entries:
        assert e.line is None or 1 <= e.line <= lines, (e.key, e.line)
        if e.kind == "conflict":
            assert e.detail, e.key  # every conflict says why
    # the round trip: every setting the report calls mapped/same/option is in the plan (re-checked by the solver)
    assert not [e for e in result.entries if e.kind == "conflict" and e.detail.startswith("the final plan has")]


@pytest.mark.parametrize("path", [p for p in RECIPES if p.id not in REFUSED])
def test_plan_is_the_engines_own_resolved_config_except_listed_differences(path, monkeypatch):
    """The engine's own resolved config for the recipe (verl: its packaged main_ppo defaults plus the
    overrides; OpenRLHF: train_ppo_ray's argparse defaults plus the flags; TRL: GRPOConfig's defaults plus
    the file) against the imported config's plan, key by key: every difference is a recipe setting the report
    does not call reproduced (owned, action, reward, conflict), a key rlbridge sets itself (the importer's
    special keys), or listed under 'differs' with both values and a reason."""
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.importer.solver import resolve_config
    from rlbridge.contract.importing import Setting, same

    result = _imported(path, monkeypatch)
    backend = get_plugin_manager().backend(result.recipe.engine)
    importer = backend.recipe_importer()
    data = {"run_name": "run", **result.config, "engine_version": result.recipe.version}
    data["resources"] = {"gpus_per_node": 1, **result.config.get("resources", {})}  # as the import planned it
    if not data["reward"] or any("do not plan" in n for n in result.notes):
        data["reward"] = [
            {"name": "digit_match"}
        ]  # the import's placeholder: the recipe's own reward does not plan here
    config = resolve_config(data)
    view = recipe_view(backend, config, result.recipe)  # a key the plan leaves out: the engine's own default
    engine = dict(importer.engine_defaults(result.recipe))
    engine.update({s.key: s.value for s in result.recipe.settings})
    listed = {d.key for d in result.differences}
    unreproduced = {e.key for e in result.entries if e.kind not in ("mapped", "same", "option")}
    unreproduced |= {s.spelling for s in result.recipe.settings if s.spelling}
    silent = []
    for key, value in engine.items():
        if (
            key not in view
            or same(view[key], value)
            or (isinstance(value, str) and ("${" in value or "rlbridge-import" in value))
        ):
            continue
        if key in listed or key in unreproduced or importer.special(Setting(key, value)):
            continue
        silent.append(f"{key}: engine {value!r}, plan {view[key]!r}")
    assert not silent, "differences not listed with a reason:\n" + "\n".join(silent)
    for d in result.differences:
        assert d.reason and not same(d.engine, d.planned)
        assert f"  {d.key}: " in result.report()


def _one_line(tmp_path, engine, text, name, **kw):
    path = tmp_path / name
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        import_recipe(str(path), engine, **kw)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


def test_malformed_recipes_are_one_line_with_file_and_line(tmp_path):
    head = "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=grpo \\\n"
    # binary
    assert ":1: not a text file" in _one_line(tmp_path, "verl", bytes(range(256)) * 4, "bin.sh")
    assert "not a text file" in _one_line(tmp_path, "trl", b"learning_rate: 1\n\x00\x01", "bin.yaml")
    # truncated: a shell quote, a Python call, a YAML mapping
    assert ":3: unterminated" in _one_line(tmp_path, "verl", head + "  data.truncation='err", "cut.sh")
    assert "cut.py:2: Python syntax error" in _one_line(
        tmp_path, "trl", "from trl import GRPOConfig\nargs = GRPOConfig(\n    beta=0.1,\n", "cut.py"
    )
    assert "cut.yaml:3: YAML syntax error" in _one_line(
        tmp_path, "trl", "learning_rate: 1.0e-6\nnum_generations: [8\n", "cut.yaml"
    )
    # wrong types, checked against TRL's own GRPOConfig
    msg = _one_line(tmp_path, "trl", "num_generations: 8\nlearning_rate: fast\n", "types.yaml")
    assert "types.yaml:2: learning_rate: 'fast'" in msg and "float" in msg
    msg = _one_line(tmp_path, "trl", "learning_rate: 1.0e-6\nnum_generations: [8]\n", "types2.yaml")
    assert "types2.yaml:2: num_generations: [8]" in msg and "int" in msg
    msg = _one_line(tmp_path, "trl", "learning_rate: 1.0e-6\nlr_scheduler_type: cosin\n", "types3.yaml")
    assert "types3.yaml:2:" in msg and "cosin" in msg
    # wrong types against verl's packaged config and OpenRLHF's parser (the copy made from its environment)
    msg = _one_line(tmp_path, "verl", head + "  data.train_batch_size=fast\n", "vtype.sh")
    assert "vtype.sh:3: data.train_batch_size: 'fast' is not a number" in msg
    msg = _one_line(tmp_path, "verl", head + "  data.filter_overlong_prompts=maybe\n", "vtype2.sh")
    assert "vtype2.sh:3:" in msg and "not a boolean" in msg
    orl = "python3 -m openrlhf.cli.train_ppo_ray \\\n  --actor.adam.lr 1e-6 \\\n"
    assert "otype.sh:3: --train.batch_size: 'fast' is not an int" in _one_line(
        tmp_path, "openrlhf", orl + "  --train.batch_size fast\n", "otype.sh"
    )
    assert "otype2.sh:3: --train.colocate_all takes no value" in _one_line(
        tmp_path, "openrlhf", orl + "  --train.colocate_all 1\n", "otype2.sh"
    )
    # unknown flags and keys, a Hydra typo
    msg = _one_line(
        tmp_path,
        "openrlhf",
        "python3 -m openrlhf.cli.train_ppo_ray \\\n  --actor.adam.lr 1e-6 \\\n  --actor_learning_rate 1e-6\n",
        "flag.sh",
    )
    assert "flag.sh:3:" in msg and "unknown OpenRLHF" in msg
    msg = _one_line(tmp_path, "verl", head + "  actor_rollout_ref.actor.optim.lrr=1e-6\n", "typo.sh")
    assert "typo.sh:3: unknown verl" in msg and "lr" in msg
    msg = _one_line(tmp_path, "verl", head + "  data.train_batch_size=[8\n", "hydra.sh")
    assert "hydra.sh:3: not a Hydra override" in msg


def test_cli_prints_errors_literally_with_exit_2(tmp_path):
    """`script.sh:100:` stays as written (rich would render `:100:` as an emoji), and a binary recipe is
    one line, not a traceback."""
    script = tmp_path / "script.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=grpo \\\n  :100: [bold]x[/bold]\n"
    )
    binary = tmp_path / "blob.sh"
    binary.write_bytes(bytes(range(256)))
    for path, expected in (
        (script, f"{script}:3: not a Hydra override: ':100:'"),
        (binary, f"{binary}:1: not a text file"),
    ):
        res = subprocess.run(
            [sys.executable, "-m", "rlbridge", "import", str(path), "--from", "verl"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 2, res.stderr
        assert expected in res.stderr and "Traceback" not in res.stderr and "\U0001f4af" not in res.stderr
        assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1, res.stderr
    # the forms that made the old word scanner loop forever, through the whole command, with a time limit
    looped = tmp_path / "looped.sh"
    looped.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=grpo \\\n  data.train_batch_size=16 "
        "2>&1 | tee log.txt &\nwait\necho done >&2 &>> log.txt\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "rlbridge", "import", str(looped), "--from", "verl", "--reward", "digit_match"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "data.train_batch_size=16" in res.stdout and "2>&1" not in res.stdout


def test_a_conflicts_advice_can_be_followed(tmp_path):
    """verl's trainer.nnodes=2 cannot be reproduced on the one-machine cluster a run starts; the conflict
    names the canonical knob and what that knob needs as well, and the config with both set plans
    trainer.nnodes=2 (before, the advice 'set resources.nodes' was itself refused, a dead end)."""
    from rlbridge.contract.registry import get_plugin_manager

    recipe = tmp_path / "two_nodes.sh"
    recipe.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=grpo \\\n  data.train_batch_size=16 \\\n"
        "  actor_rollout_ref.model.path=Qwen/Qwen3-8B \\\n  trainer.n_gpus_per_node=8 \\\n  trainer.nnodes=2\n"
    )
    result = import_recipe(str(recipe), "verl", rewards=[{"name": "digit_match"}])
    [conflict] = [e for e in result.entries if e.kind == "conflict" and e.key == "trainer.nnodes"]
    assert conflict.line == 6
    assert "set resources.nodes" in conflict.detail and "resources.ray_address" in conflict.detail, conflict.detail
    data = {"run_name": "run", **result.config}
    data["resources"] = {
        **data.get("resources", {}),
        "nodes": 2,
        "ray_address": "10.0.0.1:6379",
    }  # the advice, followed
    backend, config = get_plugin_manager().backend("verl"), resolve_config(data)
    view = backend.recipe_importer().view(backend.plan(config).native, config)
    assert view["trainer.nnodes"] == 2 and view["trainer.n_gpus_per_node"] == 8
