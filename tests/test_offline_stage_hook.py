"""The offline stages' extension point on Backend (issue 44): `plan` calls translate_stage for an offline config
and translate otherwise, `train` (what the runner and the engine process call) calls run_stage for it and run
otherwise, and a backend without the hook has the stages refused naming it, exit code 2. Stub backends test the
core contract here; the adapters' stages are proven against their engines in tests/test_stages.py."""

import pytest

from rlbridge import hookimpl
from rlbridge.contract.backend import Backend, canonical_knobs, honoured
from rlbridge.contract.registry import PluginManager
from rlbridge.errors import CapabilityError
from rlbridge.run.loading import load_config
from tests.conftest import MINIMAL, run_cli, write_config

SFT = """\
backend: nostages
model: {path: builtin:tiny-digits}
algorithm: {name: sft}
data:
  train: {type: generator, name: digit_sft, args: {num_rows: 64}}
offline: {max_length: 32}
training: {steps: 2, batch_size: 4, lr: 1.0e-3}
resources: {gpus_per_node: 0}
"""

GRPO = MINIMAL  # an RL config (its backend is overridden)


CALLED: list[tuple[str, str]] = []  # (the method the runner's train called, algorithm.name)


class NoStages(Backend):
    """Honours every knob and declares no offline stage: the default refuses them."""

    name = "nostages"
    distribution = "rlbridge"
    supported_versions = ">=0.1"

    def capabilities(self):
        return [honoured(k) for k in canonical_knobs()]

    def translate(self, config):
        return {"trainer": "rl", "lr": config.training.lr}

    def run(self, plan, ctx):
        CALLED.append(("run", ctx.config.algorithm.name))


class WithStages(NoStages):
    name = "withstages"

    def translate_stage(self, config):
        return {"stage": config.algorithm.name, "lr": config.training.lr}

    def run_stage(self, plan, ctx):
        CALLED.append(("run_stage", plan.native["stage"]))


class Plugin:
    @hookimpl
    def rlbridge_register_backends(self):
        return [NoStages, WithStages]


def _config(tmp_path, text, backend, *overrides):
    return load_config(
        write_config(tmp_path, text), [f"backend={backend}", f"output_dir={tmp_path}/{backend}", *overrides]
    )


def test_a_backend_without_the_hook_refuses_an_offline_stage_naming_itself(tmp_path):
    backend = NoStages()
    for stage in ("sft", "dpo", "reward_model"):
        config = _config(tmp_path, SFT, "nostages", f"algorithm.name={stage}")
        with pytest.raises(CapabilityError) as refused:
            backend.plan(config)
        message = str(refused.value)
        assert message.startswith(f"backend 'nostages' cannot honour algorithm.name={stage}: it runs no offline stage")
        assert message.endswith("run the stage with a backend that does (docs/stages.md)")
    assert backend.plan(_config(tmp_path, GRPO, "nostages")).native == {"trainer": "rl", "lr": 5.0e-3}


def test_the_cli_refuses_it_in_one_line_with_exit_code_2(tmp_path):
    plugin = tmp_path / "nostages_plugin.py"  # NoStages as a plugin file, for the real command
    plugin.write_text(
        "from rlbridge import hookimpl\n"
        "from rlbridge.contract.backend import Backend, canonical_knobs, honoured\n\n\n"
        "class NoStages(Backend):\n"
        "    name, distribution, supported_versions = 'nostages', 'rlbridge', '>=0.1'\n\n"
        "    def capabilities(self):\n"
        "        return [honoured(k) for k in canonical_knobs()]\n\n"
        "    def translate(self, config):\n"
        "        return {}\n\n"
        "    def run(self, plan, ctx):\n"
        "        pass\n\n\n"
        "@hookimpl\n"
        "def rlbridge_register_backends():\n"
        "    return [NoStages]\n"
    )
    result = run_cli("plan", str(write_config(tmp_path, SFT)), "-p", str(plugin))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "error: backend 'nostages' cannot honour algorithm.name=sft: it runs no offline stage"
    ), result.stderr


def test_plan_and_train_dispatch_an_offline_stage_to_its_hook(tmp_path):
    from rlbridge.run.runner import train

    pm = PluginManager()
    pm.register(Plugin(), "stage-stubs")
    backend = WithStages()
    assert backend.plan(_config(tmp_path, SFT, "withstages")).native == {"stage": "sft", "lr": 1.0e-3}
    assert backend.plan(_config(tmp_path, GRPO, "withstages")).native == {"trainer": "rl", "lr": 5.0e-3}
    CALLED.clear()
    for text in (SFT, GRPO):  # in the user's process (engine_env current: the stub's engine is here)
        train(_config(tmp_path, text, "withstages"), pm, progress=False)
    assert CALLED == [("run_stage", "sft"), ("run", "grpo")]
