"""The backend contract and plugin registration, with a stub backend (core only, no engine)."""

import importlib
import json
import math
import sys
import textwrap

import pytest

from rlbridge import hookimpl
from rlbridge.contract.backend import Backend, approximated, canonical_knobs, honoured, rejected
from rlbridge.errors import CapabilityError, RLBridgeError
from rlbridge.run.loading import load_config
from rlbridge.contract.registry import PluginManager, get_plugin_manager, reset_plugin_manager
from tests.conftest import MINIMAL, run_cli, write_config


class StubBackend(Backend):
    name = "stub"
    distribution = "rlbridge"
    supported_versions = ">=0.1"

    def capabilities(self):
        caps = [honoured(k) for k in canonical_knobs() if k not in ("algorithm.clip_high", "rollout.top_k")]
        caps.append(rejected("algorithm.clip_high", "stub has no clip-higher; use backend: trl"))
        caps.append(approximated("rollout.top_k", "k", "stub samples top-k approximately"))
        return caps

    def translate(self, config):
        return {"lr": config.training.lr}

    def run(self, plan, ctx):
        for step in range(1, 3):
            ctx.emit_step(step, {"reward/mean": step / 2, "not_canonical": 1.0, "kl": float("nan")})


class StubPlugin:
    @hookimpl
    def rlbridge_register_backends(self):
        return [StubBackend]


def _pm():
    pm = PluginManager()
    pm.register(StubPlugin(), "stub-plugin")
    return pm


def test_rejected_knob_at_default_is_fine_and_non_default_errors(tmp_path):
    cfg = load_config(write_config(tmp_path, MINIMAL), ["backend=stub"])
    backend = StubBackend()
    assert backend.check_capabilities(cfg) == ["rollout.top_k: stub samples top-k approximately"]
    cfg = load_config(write_config(tmp_path, MINIMAL), ["backend=stub", "algorithm.clip_high=0.28"])
    with pytest.raises(CapabilityError, match=r"backend 'stub' cannot honour algorithm.clip_high=0.28: .*backend: trl"):
        backend.check_capabilities(cfg)


def test_explain_calls_a_knob_approximated_only_where_its_approximation_holds(tmp_path):
    class Conditional(StubBackend):
        def capabilities(self):
            caps = [c for c in super().capabilities() if c.knob != "rollout.top_k"]
            when = lambda config: config.rollout.top_k > 10  # noqa: E731
            return [*caps, approximated("rollout.top_k", "k", "top-k above 10 is capped", when=when)]

    backend = Conditional()
    for top_k, labelled in ((5, False), (50, True)):
        cfg = load_config(write_config(tmp_path, MINIMAL), ["backend=stub", f"rollout.top_k={top_k}"])
        row = next(text for knob, _, text in backend.explain(cfg, backend.plan(cfg)) if knob == "rollout.top_k")
        assert ("approximated:" in row) is labelled, row
        assert "top-k above 10 is capped" in row


def test_missing_capability_is_an_adapter_error(tmp_path):
    class Incomplete(StubBackend):
        def capabilities(self):
            return [honoured("algorithm.name")]

    cfg = load_config(write_config(tmp_path, MINIMAL))
    with pytest.raises(CapabilityError, match="declares no capability for: algorithm.group_size"):
        Incomplete().check_capabilities(cfg)


def test_a_knob_declared_twice_is_an_adapter_error(tmp_path):
    class Twice(StubBackend):
        def capabilities(self):
            return [*super().capabilities(), rejected("algorithm.group_size", "declared again elsewhere")]

    cfg = load_config(write_config(tmp_path, MINIMAL))
    with pytest.raises(CapabilityError, match="declares algorithm.group_size twice"):
        Twice().check_capabilities(cfg)


def test_run_streams_canonical_metrics_surfaces_non_finite_ones_and_writes_run_files(tmp_path):
    from rlbridge.run.runner import train

    # the stub's kl is NaN at every step: recorded (null, named), passed on, and here only warned about
    cfg = load_config(
        write_config(tmp_path, MINIMAL), ["backend=stub", f"output_dir={tmp_path}/run", "training.on_nonfinite=warn"]
    )
    seen = []

    class Recorder:
        @hookimpl
        def rlbridge_step_end(self, step, metrics):
            seen.append((step, metrics))

        @hookimpl
        def rlbridge_run_end(self, summary):
            seen.append(("end", summary["status"]))

    pm = _pm()
    pm.register(Recorder(), "recorder")
    summary = train(cfg, pm, progress=False)
    assert [(s, {k: v for k, v in m.items() if k != "kl"}) for s, m in seen[:2]] == [
        (1, {"reward/mean": 0.5}),
        (2, {"reward/mean": 1.0}),
    ]
    assert all(math.isnan(m["kl"]) for _, m in seen[:2]) and seen[2] == ("end", "completed")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows == [
        {"step": 1, "reward/mean": 0.5, "kl": None, "nonfinite": ["kl"]},
        {"step": 2, "reward/mean": 1.0, "kl": None, "nonfinite": ["kl"]},
    ]
    assert summary["reward_first"] == 0.5 and summary["reward_last"] == 1.0 and summary["nonfinite_steps"] == [1, 2]
    for name in ("config.yaml", "plan.yaml", "summary.json", "reward.png"):
        assert (tmp_path / "run" / name).exists(), name


def test_failed_run_calls_run_failed_and_keeps_metrics(tmp_path):
    from rlbridge.run.runner import train

    class Failing(StubBackend):
        def run(self, plan, ctx):
            ctx.emit_step(1, {"reward/mean": 0.1})
            raise RuntimeError("engine crashed")

    class FailingPlugin:
        @hookimpl
        def rlbridge_register_backends(self):
            return [type("F", (Failing,), {"name": "failing"})]

    failures = []

    class Recorder:
        @hookimpl
        def rlbridge_run_failed(self, error, summary):
            failures.append((str(error), summary["status"]))

    pm = PluginManager()
    pm.register(FailingPlugin(), "failing")
    pm.register(Recorder(), "recorder")
    cfg = load_config(write_config(tmp_path, MINIMAL), ["backend=failing", f"output_dir={tmp_path}/run"])
    with pytest.raises(RuntimeError):
        train(cfg, pm, progress=False)
    assert failures == [("engine crashed", "failed")]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == 1
    assert "engine crashed" in (tmp_path / "run" / "error.txt").read_text()


def _install_fake_distribution(tmp_path, module_body, module="acme_rewards"):
    """A real installed distribution (dist-info + module) that declares an `rlbridge` entry point."""
    site = tmp_path / "site"
    (site / "acme_rewards-1.0.dist-info").mkdir(parents=True)
    (site / "acme_rewards-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-rewards\nVersion: 1.0\n"
    )
    (site / "acme_rewards-1.0.dist-info" / "entry_points.txt").write_text(f"[rlbridge]\nacme = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(module_body))
    return site


ACME = """
from rlbridge import hookimpl
from rlbridge.contract.registry import RewardPlugin

def shout(**args):
    return lambda inputs: [float(x.completion.isupper()) for x in inputs]

@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("shout", shout, "1 if the completion is upper case")]
"""


def test_third_party_plugin_registers_through_entry_points(tmp_path, monkeypatch):
    site = _install_fake_distribution(tmp_path, ACME)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    reset_plugin_manager()
    pm = get_plugin_manager()
    reg = pm.items["reward"]["shout"]
    assert (reg.provider, reg.distribution) == ("acme", "acme-rewards")
    # built-ins come through the same group, from the rlbridge distribution
    assert pm.items["reward"]["digit_match"].distribution == "rlbridge"
    assert pm.items["backend"]["trl"].distribution == "rlbridge"
    res = run_cli("plugins", env={"PYTHONPATH": str(site), "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "shout" in res.stdout and "acme-rewards" in res.stdout


def test_duplicate_plugin_names_are_an_error(tmp_path, monkeypatch):
    site = _install_fake_distribution(tmp_path, ACME.replace('"shout"', '"digit_match"'), module="acme_dup")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    reset_plugin_manager()
    with pytest.raises(RLBridgeError, match="reward 'digit_match' is registered twice"):
        _ = get_plugin_manager().items  # collecting the registrations raises


def test_plan_imports_no_torch(tmp_path):
    import subprocess

    from tests.conftest import QUICKSTART

    code = (
        "import sys; from rlbridge.cli import main; sys.argv=['rlbridge','plan',%r];"
        "import atexit; atexit.register(lambda: print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', "
        "file=sys.stderr));"
        "main()" % str(QUICKSTART)
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "NO-TORCH" in res.stderr
    assert "GRPOTrainer" in res.stdout and "num_generations: 8" in res.stdout


def test_help_and_schema():
    assert run_cli("--help").returncode == 0
    res = run_cli("schema")
    schema = json.loads(res.stdout)
    assert schema["additionalProperties"] is False
    # every field is documented where it is declared
    assert "Samples generated per prompt" in json.dumps(schema)


def test_every_config_field_is_documented():
    from pydantic import BaseModel

    from rlbridge.contract.config import RunConfig
    from rlbridge.contract.strict_model import document_fields

    document_fields()

    def walk(model, prefix=""):
        for name, info in model.model_fields.items():
            assert info.description, f"{prefix}{name} has no docstring"
            sub = info.annotation
            for cand in (sub, *getattr(sub, "__args__", ())):
                if isinstance(cand, type) and issubclass(cand, BaseModel):
                    walk(cand, f"{prefix}{name}.")

    walk(RunConfig)
