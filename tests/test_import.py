"""`rlbridge import`: engine recipes -> canonical config, and the round trip plan(import(recipe)).

The round trip is re-checked here independently of the importer's own check: the written config is
planned again by the backend, and every setting the report does not list as owned, needing action
or in conflict must come back with the recipe's value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlbridge.contract.config import RunConfig
from rlbridge.contract.registry import get_plugin_manager
from rlbridge.errors import ConfigError
from rlbridge.importer.recipe_import import import_recipe
from rlbridge.importer.solver import recipe_view
from rlbridge.contract.importing import same
from rlbridge.run.runner import resolve

pytest.importorskip("hydra", reason="rlbridge[import] (hydra-core) parses verl's Hydra overrides")

RECIPES = Path(__file__).parent / "fixtures" / "recipes"
# every recipe of every backend that has a folder of them here (tests/fixtures/recipes/<backend>/)
FIXTURES = [
    (folder.name, p.name)
    for folder in sorted(RECIPES.iterdir())
    if folder.name in get_plugin_manager().items["backend"]
    for p in sorted(folder.iterdir())
]
_cache: dict = {}


def imported(engine: str, name: str):
    if (engine, name) not in _cache:
        _cache[(engine, name)] = import_recipe(str(RECIPES / engine / name), engine)
    return _cache[(engine, name)]


def plan_view(result, engine: str) -> dict:
    backend = get_plugin_manager().backend(engine)
    data = dict(
        result.config, reward=result.config["reward"] or [{"name": "digit_match"}], engine_version=result.recipe.version
    )
    config = resolve(RunConfig.model_validate(data))
    return recipe_view(backend, config, result.recipe)  # a key the plan leaves out: the engine's default


@pytest.mark.parametrize("engine,name", FIXTURES)
def test_round_trip(engine, name):
    result = imported(engine, name)
    view = plan_view(result, engine)
    settings = {(s.spelling or s.key, s.line): s for s in result.recipe.settings}
    kept = [e for e in result.entries if e.kind in ("mapped", "same", "option")]
    assert len(kept) >= 0.6 * len(result.entries), result.report()
    # every conflict is one the recipe makes with itself (the plan names the line it would lose), and only
    # those listed here: a conflict that is a gap in the mapping fails this test
    conflicts = {e.key: e.detail for e in result.entries if e.kind == "conflict"}
    assert set(conflicts) == CONFLICTS.get(f"{engine}/{name}", set()), result.report()
    for key, detail in conflicts.items():
        assert detail.startswith("conflicts with the recipe's own line "), (key, detail)
    for entry in kept:
        setting = settings[(entry.key, entry.line)]
        assert setting.key in view and same(view[setting.key], setting.value), (
            f"{entry.key}={setting.value} ({entry.kind}) planned as {view.get(setting.key)}"
        )
    # nothing dropped silently: every setting of the recipe is in the report exactly once
    assert sorted((e.key, e.line) for e in result.entries) == sorted(settings)
    for entry in result.entries:
        if entry.kind in ("owned", "action", "conflict"):
            assert entry.detail, entry


def by_recipe(table: dict[str, object]) -> list[tuple[str, str]]:
    """(engine, file name) of each fixture a table below keys by its path under RECIPES ('<engine>/<file>')."""
    return [tuple(key.split("/")) for key in sorted(table)]


# The tables below key each fixture's expectations by its path under RECIPES.
# Conflicts a fixture is expected to report, each explained by the recipe line it conflicts with. None
# left: verl's total_training_steps beside total_epochs ("whichever comes first") is training.steps
# beside training.epochs.
CONFLICTS: dict[str, set[str]] = {}

EXPECTED = {
    "verl/grpo_gsm8k.sh": {
        "algorithm.name": "grpo",
        "algorithm.group_size": 8,
        "algorithm.kl_coef": 0.001,
        "training.batch_size": 32,
        "training.mini_batch_size": 128,
        "training.micro_batch_size": 8,
        "training.lr": 1e-6,
        "training.epochs": 15,
        "resources.gpus_per_node": 8,
        "rollout.max_new_tokens": 1024,
        "rollout.max_prompt_tokens": 512,
        "checkpoint.interval": 20,
    },
    "verl/ppo_critic.sh": {
        "algorithm.name": "ppo",
        "algorithm.kl_coef": 0.002,
        "algorithm.kl_placement": "reward",
        "training.steps": 40,
        "training.mini_batch_size": 16,
        "resources.gpus_per_node": 4,
    },
    "verl/lora_grpo.sh": {
        "model.lora.rank": 64,
        "model.lora.alpha": 32,
        "algorithm.clip_high": 0.28,
        "algorithm.clip_low": 0.2,
        "rollout.temperature": 0.8,
        "rollout.top_p": 0.95,
        "data.shuffle": False,
        "checkpoint.keep_last": 2,
        "training.steps": 20,
        "training.lr": 3e-6,
    },
    "verl/reward_function.sh": {"algorithm.group_size": 4, "training.lr": 5e-3, "training.steps": 30},
    "openrlhf/grpo_hybrid_engine.sh": {
        "algorithm.group_size": 8,
        "algorithm.kl_coef": 1e-3,
        "training.batch_size": 128,
        "training.mini_batch_size": 128,
        "training.micro_batch_size": 8,
        "training.steps": 100,
        "training.seed": 42,
        "training.lr": 5e-7,
        "model.use_chat_template": True,
        "resources.gpus_per_node": 8,
    },
    "openrlhf/ppo_critic.sh": {"algorithm.name": "ppo", "algorithm.group_size": 1, "training.steps": 100},
    "openrlhf/lora_agent.sh": {
        "algorithm.name": "reinforce_pp",
        "algorithm.clip_high": 0.28,
        "training.lr_schedule": "cosine",
        "training.grad_clip": 0.5,
        "algorithm.epochs_per_rollout": 2,
        "training.steps": 20,
    },
    "trl/rloo.py": {"algorithm.name": "rloo", "training.epochs": 2, "training.seed": 3, "algorithm.kl_coef": 0.05},
    "trl/reward_funcs.py": {
        "algorithm.group_size": 8,
        "training.lr": 5e-3,
        "training.steps": 30,
        "rollout.max_new_tokens": 16,
    },
    "trl/grpo.yaml": {
        "algorithm.kl_coef": 0.04,
        "algorithm.clip_high": 0.28,
        "training.lr_schedule": "cosine",
        "checkpoint.keep_last": 2,
        "training.seed": 42,
        # per_device 8 x gradient_accumulation 4 = one update of 32 samples = 4 prompts x 8
        "training.batch_size": 4,
        "training.micro_batch_size": 8,
        "training.mini_batch_size": None,
        "algorithm.epochs_per_rollout": 1,
        "training.steps": 500,
        "training.warmup_steps": 10,
        "checkpoint.interval": 100,
    },
    # TRL's CLI hands the keys GRPOConfig does not know to accelerate launch (issue 42: adapters/trl/layout.py)
    "trl/grpo_multi_gpu.yaml": {"resources.gpus_per_node": 4, "resources.nodes": 1, "training.strategy": "auto"},
    "trl/grpo_fsdp2.yaml": {"resources.gpus_per_node": 4, "training.strategy": "fsdp", "training.steps": 200},
    "trl/grpo_zero3_two_nodes.yaml": {
        "resources.nodes": 2,
        "resources.gpus_per_node": 8,
        "training.strategy": "deepspeed",
        "training.sharding": "parameters",
        "training.offload.parameters": True,
        "training.offload.optimizer": True,
    },
    "trl/lora_grpo.yaml": {
        "training.batch_size": 2,
        "training.micro_batch_size": 4,
        "algorithm.epochs_per_rollout": 2,
        "training.steps": 100,
        "model.lora.rank": 16,
    },
    "openrlhf/flat_rloo_0.9.sh": {
        "algorithm.name": "rloo",
        "training.seed": 7,
        "training.batch_size": 32,
        "training.micro_batch_size": 8,
        "training.forward_micro_batch_size": 16,
    },
}


@pytest.mark.parametrize("engine,name", by_recipe(EXPECTED))
def test_imported_values(engine, name):
    config = RunConfig.model_validate(
        dict(imported(engine, name).config, reward=imported(engine, name).config["reward"] or [{"name": "digit_match"}])
    )
    for path, want in EXPECTED[f"{engine}/{name}"].items():
        value = config
        for part in path.split("."):
            value = getattr(value, part)
        assert same(value, want), f"{path}: {value} != {want}"


REWARDS = {
    "verl/reward_function.sh": [{"native": "verl", "function": "./reward.py:compute_score"}],
    "verl/reward_model.sh": [{"model": "./tiny/reward_model"}],
    "openrlhf/reward_model.sh": [{"model": "./tiny/reward_model"}],
    "openrlhf/ppo_critic.sh": [{"native": "openrlhf", "function": "./reward_func.py:reward_func"}],
    "trl/reward_model.yaml": [
        {"model": "./tiny/reward_model", "weight": 1.0},
        {"native": "trl", "function": "trl.rewards:think_format_reward", "weight": 0.5},
    ],
    "trl/reward_funcs.py": [
        {"native": "trl", "function": f"{(RECIPES / 'trl' / 'reward_funcs.py').resolve()}:{f}", "weight": w}
        for f, w in (("digit_reward", 1.0), ("format_reward", 0.1))
    ],
}


# the recipe settings that name a reward, as each engine spells them (the spellings do not overlap)
REWARD_SETTINGS = (
    "reward.reward_model.model_path",
    "custom_reward_function.path",
    "reward.model_name_or_path",
    "reward.remote_url",
    "reward_model_name_or_path",
    "GRPOTrainer.reward_funcs",
)


@pytest.mark.parametrize("engine,name", by_recipe(REWARDS))
def test_recipe_rewards_become_canonical_rewards(engine, name):
    """A reward model (verl reward_model.*, OpenRLHF --reward.model_name_or_path, TRL reward_model_name_or_path or
    a model in reward_funcs) becomes reward: [{model}]; a reward function file becomes a native reward, run unchanged."""
    result = imported(engine, name)
    assert result.config["reward"] == REWARDS[f"{engine}/{name}"], result.report()
    RunConfig.model_validate(result.config)  # the written config loads as it is
    kinds = {e.key: e.kind for e in result.entries}
    for key in REWARD_SETTINGS:
        if key in kinds:
            assert kinds[key] in ("reward", "mapped"), (key, kinds[key])
    # OpenRLHF runs a lone reward model in its own reward-model actors: the plan gives the flag back
    if (engine, name) == ("openrlhf", "reward_model.sh"):
        assert kinds["reward.model_name_or_path"] == "mapped"
    if engine == "trl":  # the weights travel with the rewards, in TRL's order (reward model first)
        assert kinds["reward_weights"] == "mapped"


def test_reported_kinds():
    verl = imported("verl", "reward_function.sh")
    kinds = {e.key: e.kind for e in verl.entries}
    assert kinds["custom_reward_function.path"] == "reward"
    assert kinds["trainer.logger"] == "sink"  # console: rlbridge's progress bar
    shm = import_recipe(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.model.use_shm=True",
        "verl",
        rewards=[{"name": "digit_match"}],
    )
    options = {e.key: e.detail for e in shm.entries if e.kind == "option"}
    assert options == {"actor_rollout_ref.model.use_shm": "backend_options.verl.actor_rollout_ref.model.use_shm"}
    assert imported("openrlhf", "flat_rloo_0.9.sh").recipe.version == "0.9.10"


def test_same_compares_native_values_as_the_engine_reads_them():
    """The round trip's equality, fast paths included: numbers by value, bools only with bools, sequences
    of either kind, paths normalised; NaN is never the same, not even as itself."""
    nan = float("nan")
    assert same(1, 1.0) and same((1, "a"), [1.0, "a"]) and same({"k": [2]}, {"k": (2.0,)})
    assert same("/data/x//y.parquet", "/data/x/y.parquet") and same(None, None)
    assert not same(1, True) and not same([1], [True]) and not same(0, None) and not same("1", 1)
    assert not same(nan, nan) and not same([nan], [nan])
    shared = {"a": [1, 2]}
    assert same(shared, shared) and not same(shared, {"a": [1, 3]})


def test_a_recipe_contradicting_itself_is_a_conflict_with_its_line(tmp_path):
    """KL in the loss and KL in the reward at once: the canonical config has one KL placement, so one of
    the two settings cannot come back; it is reported as a conflict with its line, never dropped."""
    script = tmp_path / "kl_twice.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n"
        "    algorithm.adv_estimator=grpo data.train_batch_size=32 actor_rollout_ref.rollout.n=8 \\\n"
        "    actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.001 \\\n"
        "    algorithm.use_kl_in_reward=True algorithm.kl_ctrl.kl_coef=0.01 \\\n"
        "    trainer.total_training_steps=40 trainer.total_epochs=3\n"
    )
    result = import_recipe(str(script), "verl")
    conflicts = {e.key: e for e in result.entries if e.kind == "conflict"}
    assert conflicts and set(conflicts) <= {
        "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.kl_loss_coef",
        "algorithm.use_kl_in_reward",
        "algorithm.kl_ctrl.kl_coef",
    }, result.report()
    assert all(e.line and e.detail for e in conflicts.values()), result.report()
    # the two stop conditions travel together (training.steps beside training.epochs)
    kinds = {e.key: e.kind for e in result.entries}
    assert kinds["trainer.total_training_steps"] == kinds["trainer.total_epochs"] == "mapped", result.report()


def test_switch_engine_plans():
    """The README story: a verl recipe, imported, plans on OpenRLHF (backend_options.verl stay behind)."""
    result = import_recipe(str(RECIPES / "verl" / "grpo_gsm8k.sh"), "verl", rewards=[{"name": "exact_match"}])
    data = dict(result.config, backend="openrlhf")
    if data.get("training", {}).get("offload", {}).get("reference"):
        # verl's reference offload (ref.fsdp_config.param_offload) is ZeRO-3's on OpenRLHF: its refusal says so
        data["training"] = {**data["training"], "sharding": "parameters"}
    config = resolve(RunConfig.model_validate(data))
    native = get_plugin_manager().backend("openrlhf").plan(config).native
    args = native["args"]
    assert args[args.index("--rollout.batch_size") + 1] == "32"
    assert args[args.index("--rollout.n_samples_per_prompt") + 1] == "8"


def _error(tmp_path, engine, text, name="recipe.sh", version=None):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        import_recipe(str(path), engine, version)
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_errors_are_one_line(tmp_path):
    assert "no `python -m verl.trainer.main_ppo` command" in _error(tmp_path, "verl", "set -x\necho hello\n")
    msg = _error(
        tmp_path,
        "verl",
        "python3 -m verl.trainer.main_ppo \\\n  data.train_batch_size=8 \\\n  actor_rollout_ref.actor.ppo_mini_bsz=8\n",
    )
    assert "recipe.sh:3" in msg and "unknown verl 0.9.1 key" in msg and "ppo_mini_batch_size" in msg
    import_recipe("python3 -m verl.trainer.main_ppo +actor_rollout_ref.actor.my_new_key=1", "verl")  # `+` adds a key
    msg = _error(
        tmp_path,
        "openrlhf",
        "python3 -m openrlhf.cli.train_ppo_ray \\\n  --actor.adam.lr 1e-6 \\\n  --actor_learning_rate 1e-6\n",
    )
    assert "recipe.sh:3" in msg and "--actor.adam.lr" in msg
    msg = _error(tmp_path, "openrlhf", "python3 -m openrlhf.cli.train_ppo_ray --actor.adam.lr 1e-6\n", version="0.9.10")
    assert "--actor_learning_rate" in msg
    code = "from trl import GRPOConfig\nimport os\nargs = GRPOConfig(\n    output_dir='x',\n    learning_rate=float(os.environ['LR']),\n)\n"
    msg = _error(tmp_path, "trl", code, "train.py")
    assert "train.py:5" in msg and "learning_rate" in msg and "cannot be read without running" in msg
    msg = _error(tmp_path, "trl", "from trl import GRPOConfig\nkw = dict(a=1)\nargs = GRPOConfig(**kw)\n", "train2.py")
    assert "train2.py:3" in msg
    msg = _error(
        tmp_path,
        "trl",
        "from trl import GRPOConfig\nargs = GRPOConfig(output_dir='x', learning_rat=1e-6)\n",
        "train3.py",
    )
    assert "learning_rat" in msg and "learning_rate" in msg


def test_nothing_is_executed(tmp_path):
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')\nfrom trl import GRPOConfig\nargs = GRPOConfig(output_dir='x', beta=0.1)\n"
    (tmp_path / "t.py").write_text(code)
    import_recipe(str(tmp_path / "t.py"), "trl")
    script = f"touch {marker}\npython -m verl.trainer.main_ppo algorithm.adv_estimator=grpo\n"
    (tmp_path / "t.sh").write_text(script)
    import_recipe(str(tmp_path / "t.sh"), "verl")
    assert not marker.exists()


def test_cli_writes_config_and_report(tmp_path):
    out = tmp_path / "job.yaml"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlbridge",
            "import",
            str(RECIPES / "verl" / "reward_function.sh"),
            "--from",
            "verl",
            "--reward",
            "digit_match",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert out.exists() and (tmp_path / "job.import.txt").exists()
    assert "custom_reward_function.path" in (tmp_path / "job.import.txt").read_text()
    bad = subprocess.run(
        [sys.executable, "-m", "rlbridge", "import", "echo hi", "--from", "verl"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_unknown_openrlhf_flag_is_refused_without_its_environment(tmp_path):
    """Issue 45: a typo in a flag exits 2 naming it, with a did-you-mean, also where no OpenRLHF environment exists
    (before, only its spelling was checked there and the typo landed in backend_options): the flag list copied from
    each version's own parser (adapters/openrlhf/recipe_defaults/parser-types-VERSION.json)."""
    cases = (
        ("0.11.2", "--actor.adam.lr 1e-6", "--actor.adam.lrr 2e-6", "actor.adam.lr"),
        (
            "0.11.0",
            "--actor.adam.lr 1e-6",
            "--algo.advantage.is_corection_enable",
            "algo.advantage.is_correction_enable",
        ),
        ("0.9.10", "--actor_learning_rate 1e-6", "--actor_learning_rat 2e-6", "actor_learning_rate"),
    )
    env = {**os.environ, "RLBRIDGE_CACHE_DIR": str(tmp_path / "empty-cache")}  # no engine environment at all
    for version, good, typo, meant in cases:
        script = tmp_path / f"typo-{version}.sh"
        script.write_text(f"python3 -m openrlhf.cli.train_ppo_ray \\\n  {good} \\\n  {typo}\n")
        cli = [sys.executable, "-m", "rlbridge", "import", str(script), "--from", "openrlhf"]
        res = subprocess.run([*cli, "--engine-version", version], capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 2, (version, res.stderr)
        message = " ".join(res.stderr.split())
        assert f"{script}:3: unknown OpenRLHF {version} flag {typo.split()[0]}" in message, message
        assert f"did you mean '{meant}'" in message and "Traceback" not in res.stderr


@pytest.mark.engine_env
def test_unknown_flag_rejected_by_openrlhf_own_parser(tmp_path, user_engine_envs):
    """OpenRLHF's own parser, read in its environment: make test runs this once it created it."""
    from rlbridge_adapters.openrlhf.importer import parser_flags

    if parser_flags("0.11.2") is None:
        pytest.skip("no complete OpenRLHF 0.11.2 engine environment here")
    # the copy used where no environment exists is this version's parser, flag for flag
    vendored = Path(__file__).parents[1] / "adapters" / "openrlhf" / "recipe_defaults" / "parser-types-0.11.2.json"
    assert set(json.loads(vendored.read_text())) == parser_flags("0.11.2") - {"help"}
    msg = _error(
        tmp_path,
        "openrlhf",
        "python3 -m openrlhf.cli.train_ppo_ray \\\n  --actor.adam.lr 1e-6 \\\n  --actor.adam.lrr 2\n",
    )
    assert "recipe.sh:3" in msg and "--actor.adam.lrr" in msg and "did you mean" in msg


@pytest.mark.engine
def test_imported_verl_recipe_trains_on_trl(tmp_path, monkeypatch):
    """The switching story end to end (plain TRL on CPU): a verl recipe, imported, trains on TRL."""
    import pandas as pd

    from rlbridge.contract.models import builtin_model_dir
    from rlbridge.run.loading import apply_override, validate_config
    from rlbridge.run.runner import train
    from rlbridge_plugins.data import digit_copy

    rows = digit_copy(num_rows=256, seed=0)
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MODEL_PATH", str(builtin_model_dir("tiny-digits")))
    result = import_recipe(str(RECIPES / "verl" / "reward_function.sh"), "verl", rewards=[{"name": "digit_match"}])
    data = dict(result.config)
    assert data["data"]["train"]["path"] == str(tmp_path / "train.parquet")
    for item in (
        "backend=trl",
        "resources.gpus_per_node=0",
        "rollout.tensor_parallel_size=1",
        "rollout.gpu_memory_utilization=0.3",
        "checkpoint.resume=false",
        "training.sequence_packing=false",
        "training.steps=3",
        # the recipe stops at whichever of 30 steps and 1 epoch comes first: TRL has one stop condition
        "training.epochs=null",
        "run_name=imported",
        f"output_dir={tmp_path / 'run'}",
        "telemetry.progress=false",
    ):
        apply_override(data, item)
    summary = train(validate_config(data))
    assert summary["status"] == "completed" and summary["steps"] == 3


SELF_LOCATING = """\
#!/bin/bash
# OpenRLHF's examples find their repository from their own location (examples/scripts/*.sh)
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
WORK_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
python3 -m openrlhf.cli.train_ppo_ray \\
   --actor.model_name_or_path $WORK_DIR/models/tiny \\
   --reward.remote_url $WORK_DIR/examples/python/reward_func.py \\
   --data.prompt_dataset "$WORK_DIR/data/train.jsonl" \\
   --data.input_key prompt --data.label_key label \\
   --ckpt.path "$(cd "$SCRIPT_DIR/../.." && pwd)/exp/ckpt" --ckpt.save_steps 5 \\
   --rollout.batch_size 2 --rollout.n_samples_per_prompt 4 --train.batch_size 8 --actor.adam.lr 2e-6
"""


def test_a_self_locating_script_imports_absolute_paths_that_plan(tmp_path):
    """Issue 45: `$(cd "$(dirname "$0")/.." && pwd)` paths are evaluated as bash runs the script, so the config
    holds the absolute paths of the files beside the script (not the `$(...)` text, once reported as mapped),
    and `rlbridge plan` accepts it."""
    from rlbridge.contract.models import builtin_model_dir

    model = builtin_model_dir("tiny-digits")
    if not (model / "config.json").exists():
        get_plugin_manager().get("model_builder", "tiny-digits", "model.path").build(model)
    repo = tmp_path / "repo"
    for folder in ("examples/scripts", "examples/python", "data", "models"):
        (repo / folder).mkdir(parents=True)
    (repo / "models" / "tiny").symlink_to(model)
    (repo / "examples" / "python" / "reward_func.py").write_text(
        "def reward_func(queries, prompts, labels, **kwargs):\n"
        "    return [float(label in query) for query, label in zip(queries, labels)]\n"
    )
    (repo / "data" / "train.jsonl").write_text('{"prompt": "1111", "label": "1"}\n{"prompt": "2222", "label": "2"}\n')
    script = repo / "examples" / "scripts" / "train.sh"
    script.write_text(SELF_LOCATING)
    out = tmp_path / "job.yaml"
    cli = [sys.executable, "-m", "rlbridge"]
    res = subprocess.run(
        [*cli, "import", str(script), "--from", "openrlhf", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # launched from elsewhere: the paths still come from the script's own location
    )
    assert res.returncode == 0, res.stderr
    import yaml

    config = yaml.safe_load(out.read_text())
    repo = repo.resolve()
    assert config["reward"] == [
        {"native": "openrlhf", "function": f"{repo}/examples/python/reward_func.py:reward_func"}
    ]
    assert config["data"]["train"] == {"type": "jsonl", "path": f"{repo}/data/train.jsonl"}
    assert config["model"]["path"] == f"{repo}/models/tiny" and config["checkpoint"]["dir"] == f"{repo}/exp/ckpt"
    assert "$(" not in out.read_text() and "$(" not in res.stdout.split("note:")[0]
    plan = subprocess.run([*cli, "plan", str(out)], capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr


def test_an_unknowable_value_is_reported_with_its_line_not_imported(tmp_path):
    """What only running the script knows (`$(date)`, a directory not on this machine) is not imported as text:
    the setting is under action with its line and the reason."""
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=grpo \\\n"
        "  trainer.default_local_dir=$(cd /rlbridge-no-such-dir && pwd)/ckpt \\\n"
        "  custom_reward_function.path=$(git rev-parse --show-toplevel)/reward.py\n"
    )
    result = import_recipe(str(script), "verl")
    entries = {e.key: e for e in result.entries}
    ckpt, reward = entries["trainer.default_local_dir"], entries["custom_reward_function.path"]
    assert (ckpt.kind, ckpt.line, reward.kind, reward.line) == ("action", 3, "action", 4), result.report()
    assert "/rlbridge-no-such-dir is not a directory on this machine" in ckpt.detail
    assert "git rev-parse" in reward.detail and "set the value in the config" in reward.detail
    assert "$(" not in result.to_yaml().split("\n", 1)[1]
    assert "checkpoint" not in result.config


BRANCHING = """\
DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}
case "$DEVICE" in
  npu) BATCH=16 ;;
  gpu) BATCH=64 ;;
esac
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=$BATCH
"""


def test_env_decides_a_branch_on_the_environment(tmp_path):
    """`case "$DEVICE" in gpu) ...`: without DEVICE the batch size is unknowable (exit 2 naming the line and
    --env); `rlbridge import --env DEVICE=gpu` reads the gpu branch."""
    script = tmp_path / "branch.sh"
    script.write_text(BRANCHING)
    cli = [sys.executable, "-m", "rlbridge", "import", str(script), "--from", "verl", "--reward", "digit_match"]
    env = {k: v for k, v in os.environ.items() if k != "DEVICE"}
    bad = subprocess.run(cli, capture_output=True, text=True, timeout=300, env=env)
    assert bad.returncode == 2 and f"{script}:6:" in bad.stderr and "--env NAME=VALUE" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    for device, batch in (("gpu", 64), ("npu", 16)):
        res = subprocess.run([*cli, "--env", f"DEVICE={device}", "--json"], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        settings = {s["key"]: s for s in json.loads(res.stdout)["settings"]}
        assert (
            settings["data.train_batch_size"]["value"] == batch
            and settings["data.train_batch_size"]["kind"] == "mapped"
        )
    wrong = subprocess.run([*cli, "--env", "DEVICE"], capture_output=True, text=True, env=env)
    assert wrong.returncode == 2 and "--env DEVICE: expected NAME=VALUE" in wrong.stderr


def _sinks_plan(config: dict) -> None:
    """Each imported sink's args are what its factory takes (the check `rlbridge plan` makes)."""
    from rlbridge.contract.plugin_args import check_args

    pm = get_plugin_manager()
    for i, sink in enumerate(RunConfig.model_validate(config).telemetry.sinks):
        plugin = pm.get("telemetry_sink", sink.name, f"telemetry.sinks[{i}].name")
        check_args(plugin.factory, sink.args, f"telemetry.sinks[{i}].args", sink.name, {"run_dir": "runs/x"})


def test_trackers_import_as_telemetry_sinks_with_their_names(tmp_path):
    """Issue 45: the recipe's trackers are telemetry.sinks with its project and run names (before: dropped as
    owned), and an API key on the command line is never written, neither in the config nor in the report."""
    secret = "0123456789abcdef-secret-key"
    verl = import_recipe(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo trainer.logger=['console','wandb','swanlab'] "
        "trainer.project_name=math_rl trainer.experiment_name=qwen_grpo",
        "verl",
        rewards=[{"name": "digit_match"}],
    )
    kinds = {e.key: (e.kind, e.detail) for e in verl.entries}
    assert verl.config["telemetry"]["sinks"] == [{"name": "wandb", "args": {"mode": "online", "project": "math_rl"}}]
    assert verl.config["run_name"] == "qwen_grpo" and kinds["trainer.experiment_name"][0] == "mapped"
    assert kinds["trainer.project_name"][0] == "sink"
    assert kinds["trainer.logger"][0] == "action" and "swanlab: rlbridge has no such sink" in kinds["trainer.logger"][1]
    board = import_recipe(  # a project and no logger: verl's default logger (console, wandb); tensorboard's directory
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo trainer.project_name=p trainer.experiment_name=e",
        "verl",
        rewards=[{"name": "digit_match"}],
    )
    assert board.config["telemetry"]["sinks"] == [{"name": "wandb", "args": {"mode": "online", "project": "p"}}]
    board = import_recipe(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo trainer.logger=[tensorboard] "
        "trainer.project_name=p trainer.experiment_name=e",
        "verl",
        rewards=[{"name": "digit_match"}],
    )
    assert board.config["telemetry"]["sinks"] == [{"name": "tensorboard", "args": {"log_dir": "tensorboard_log/p/e"}}]
    orl = import_recipe(
        f"python3 -m openrlhf.cli.train_ppo_ray --actor.adam.lr 1e-6 --logger.wandb.key {secret} "
        "--logger.wandb.project math_rl --logger.wandb.org lab --logger.wandb.group ablation "
        "--logger.wandb.run_name rf_baseline --logger.tensorboard_dir /tmp/tb",
        "openrlhf",
        rewards=[{"name": "digit_match"}],
    )
    assert orl.config["telemetry"]["sinks"] == [
        {"name": "wandb", "args": {"mode": "online", "project": "math_rl", "entity": "lab", "group": "ablation"}},
        {"name": "tensorboard", "args": {"log_dir": "/tmp/tb/rf_baseline"}},
    ]
    assert orl.config["run_name"] == "rf_baseline"
    assert {e.key: e.kind for e in orl.entries if e.key.startswith("logger.")} == dict.fromkeys(
        [f"logger.wandb.{k}" for k in ("key", "project", "org", "group", "run_name")] + ["logger.tensorboard_dir"],
        "sink",
    )
    key = next(e for e in orl.entries if e.key == "logger.wandb.key")
    assert "WANDB_API_KEY" in key.detail
    written = orl.report() + json.dumps(orl.report_data(), default=str) + orl.to_yaml()
    assert secret not in written
    flat = import_recipe(
        f"python3 -m openrlhf.cli.train_ppo_ray --actor_learning_rate 1e-6 --use_wandb {secret} --wandb_project p9",
        "openrlhf",
        rewards=[{"name": "digit_match"}],
    )
    assert flat.config["telemetry"]["sinks"] == [{"name": "wandb", "args": {"mode": "online", "project": "p9"}}]
    assert secret not in flat.report() + json.dumps(flat.report_data(), default=str) + flat.to_yaml()
    recipe = tmp_path / "grpo.yaml"
    recipe.write_text("learning_rate: 1.0e-6\nreport_to: [wandb, tensorboard]\nrun_name: trl-grpo\n")
    trl = import_recipe(str(recipe), "trl", rewards=[{"name": "digit_match"}])
    assert trl.config["telemetry"]["sinks"] == [
        {"name": "wandb", "args": {"mode": "online", "project": "huggingface"}},
        {"name": "tensorboard"},
    ]
    assert trl.config["run_name"] == "trl-grpo"
    assert {e.key: e.kind for e in trl.entries if e.key in ("report_to", "run_name")} == {
        "report_to": "sink",
        "run_name": "sink",
    }
    for result in (verl, orl, flat, trl):
        _sinks_plan(result.config)


def test_trl_python_recipe_reads_dtypes_imported_rewards_and_lora(tmp_path):
    """TRL's own examples/scripts/rloo.py style: `torch.bfloat16`, reward functions imported from trl.rewards and
    `peft_config=LoraConfig(...)` are read without running the file (before: an error at the dtype, then an
    action for the rewards and the LoRA config)."""
    recipe = tmp_path / "rloo.py"
    recipe.write_text(
        "import torch\nfrom peft import LoraConfig\nfrom trl import RLOOConfig, RLOOTrainer\n"
        "from trl.rewards import accuracy_reward, think_format_reward as think\n\n"
        "args = RLOOConfig(\n    output_dir='out',\n    model_init_kwargs={'dtype': torch.bfloat16},\n"
        "    learning_rate=1e-5,\n)\n"
        "trainer = RLOOTrainer(\n    model='Qwen/Qwen3-0.6B',\n    args=args,\n    reward_funcs=[think, accuracy_reward],\n"
        "    peft_config=LoraConfig(r=16, lora_alpha=32),\n)\n"
    )
    result = import_recipe(str(recipe), "trl")
    kinds = {e.key: e.kind for e in result.entries}
    assert result.config["reward"] == [
        {"native": "trl", "function": "trl.rewards:think_format_reward"},
        {"native": "trl", "function": "trl.rewards:accuracy_reward"},
    ]
    assert result.config["model"]["lora"]["rank"] == 16 and result.config["model"]["lora"]["alpha"] == 32
    assert kinds["model_init_kwargs"] == kinds["peft_config"] == kinds["r"] == kinds["lora_alpha"] == "mapped"
    assert kinds["RLOOTrainer.reward_funcs"] == "reward", result.report()


def test_a_command_line_longer_than_a_file_name_imports():
    """A quoted command line of 300 characters is a command line, not a file name the OS refuses (OSError)."""
    line = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo " + " ".join(
        f"+custom.key_{i}=value_{i}" for i in range(12)
    )
    assert len(line) > 255
    result = import_recipe(line, "verl", rewards=[{"name": "digit_match"}])
    assert result.recipe.source == "<command line>" and len(result.recipe.settings) == 13


def test_hub_datasets_import_as_hf_sources_and_plan(tmp_path):
    """Issue 45 item 3: a hub dataset id is data.train {type: hf, name, split, config} (before: an action, 'rlbridge
    reads local data'), read back from the plan, and the written config plans (no hub here: plan checks a hub id
    only in offline mode)."""
    orl = import_recipe(
        "python3 -m openrlhf.cli.train_ppo_ray --actor.model_name_or_path builtin:tiny-digits "
        "--data.prompt_dataset OpenRLHF/prompt-collection-v0.1 --data.prompt_split test "
        "--eval.dataset OpenRLHF/aime-2024 --eval.steps 5",
        "openrlhf",
        rewards=[{"name": "digit_match"}],
    )
    assert orl.config["data"]["train"] == {"type": "hf", "name": "OpenRLHF/prompt-collection-v0.1", "split": "test"}
    assert orl.config["data"]["eval"] == {"type": "hf", "name": "OpenRLHF/aime-2024", "split": "train"}
    kinds = {e.key: e.kind for e in orl.entries}
    assert kinds["data.prompt_dataset"] == kinds["data.prompt_split"] == kinds["eval.dataset"] == "mapped", orl.report()
    assert kinds["eval.steps"] == "mapped"
    recipe = tmp_path / "grpo.yaml"
    recipe.write_text(
        "model_name_or_path: builtin:tiny-digits\ndataset_name: openai/gsm8k\ndataset_config: main\n"
        "dataset_train_split: train[:10%]\nlearning_rate: 1.0e-6\n"
    )
    trl = import_recipe(str(recipe), "trl", rewards=[{"name": "digit_match"}])
    assert trl.config["data"]["train"] == {
        "type": "hf",
        "name": "openai/gsm8k",
        "split": "train[:10%]",
        "config": "main",
    }
    assert {e.key: e.kind for e in trl.entries if e.key.startswith("dataset_")} == dict.fromkeys(
        ("dataset_name", "dataset_config", "dataset_train_split"), "mapped"
    ), trl.report()
    script = tmp_path / "train.py"
    script.write_text(
        "from datasets import load_dataset\nfrom trl import GRPOConfig, GRPOTrainer\n"
        "train = load_dataset('trl-lib/DeepMath-103K', split='train')\n"
        "mapped = load_dataset('trl-lib/tldr', split='train')\nmapped = mapped.map(lambda r: r)\n"
        "args = GRPOConfig(output_dir='out', learning_rate=1e-6)\n"
        "GRPOTrainer(model='builtin:tiny-digits', args=args, reward_funcs='trl.rewards.accuracy_reward', "
        "train_dataset=train, eval_dataset=mapped)\n"
    )
    py = import_recipe(str(script), "trl", rewards=[{"name": "digit_match"}])
    assert py.config["data"]["train"] == {"type": "hf", "name": "trl-lib/DeepMath-103K", "split": "train"}
    kinds = {e.key: e.kind for e in py.entries}
    assert kinds["train_dataset"] == "mapped" and kinds["GRPOTrainer.eval_dataset"] == "action"  # rows made by code
    out = tmp_path / "job.yaml"
    out.write_text(orl.to_yaml())
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    plan = subprocess.run(
        [sys.executable, "-m", "rlbridge", "plan", str(out), "--set", "resources.gpus_per_node=1"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert plan.returncode == 0, plan.stderr
    assert "OpenRLHF/prompt-collection-v0.1" in plan.stdout or "<run_dir>/data/train.jsonl" in plan.stdout


def test_several_data_files_import_as_one_source_read_in_order(tmp_path):
    """verl's data.train_files=[gsm8k.parquet, math.parquet] (most of its example scripts) is one parquet source of
    both files (before: an action, 'concatenate them first'); rlbridge reads their rows one file after the other."""
    import pandas as pd

    from rlbridge.contract.data import load_rows

    files = []
    for name, digits in (("a", "12"), ("b", "345")):
        files.append(str(tmp_path / f"{name}.parquet"))
        pd.DataFrame({"prompt": list(digits), "answer": list(digits)}).to_parquet(files[-1])
    result = import_recipe(
        f"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=\"['{files[0]}', '{files[1]}']\"",
        "verl",
        rewards=[{"name": "digit_match"}],
    )
    assert result.config["data"]["train"] == {"type": "parquet", "path": files}
    assert {e.key: e.kind for e in result.entries}["data.train_files"] == "mapped", result.report()
    config = RunConfig.model_validate({**result.config, "reward": [{"name": "digit_match"}]})
    assert [r["prompt"] for r in load_rows(config.data.train, config, "data.train")] == list("12345")
