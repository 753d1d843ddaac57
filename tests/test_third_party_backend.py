"""A backend package outside rlbridge's tree runs the shipped conformance suite against itself.

The package is installed into a private site directory as a real distribution (dist-info with an
`rlbridge` entry point and a version), exactly as `pip install` would leave it, and its own test
module is the three lines a third party writes: import the suite, name the backend. Its "engine" is
a toy that trains in-process (samples token ids, decodes them with the model's tokenizer, scores
them through rlbridge's reward shim, reports
canonical metrics), enough to prove the core contract; it proves no real engine.
"""

import os
import subprocess
import sys
import textwrap
from xml.etree import ElementTree

TOY_BACKEND = """
import random

from rlbridge import hookimpl
from rlbridge.contract.backend import Backend, canonical_knobs, honoured, rejected
from rlbridge.contract.effects import REFUSED
from rlbridge.contract.rewards import RewardInput, build_rewards, score
from rlbridge.contract.data import load_rows


def _cpu_only(config):
    if config.resources.gpus_per_node not in (0, "auto"):
        return "the toy engine runs on CPU; set resources.gpus_per_node: 0"
    return None


# canonical knob -> the toy's own native key (data.train: the core loads the rows for every engine)
NATIVE = {"model.path": "model", "data.train": "", "reward": "rewards", "training.steps": "steps",
          "training.batch_size": "prompts", "training.seed": "seed", "training.lr": "lr", "training.torch_threads": "threads",
          "checkpoint.dir": "checkpoint_dir", "algorithm.group_size": "samples", "rollout.max_new_tokens": "max_tokens"}


class ToyBackend(Backend):
    name = "toy"
    distribution = "rlbridge-toy-engine"
    supported_versions = ">=1.0,<2"

    def capabilities(self):
        table = [honoured(k, NATIVE[k]) if k in NATIVE else rejected(k, "the toy engine has no such setting; leave it at its default")
                 for k in canonical_knobs() if k != "resources.gpus_per_node"]
        return [*table, honoured("resources.gpus_per_node", (), _cpu_only)]

    def knob_effects(self):
        # what the effect test's sample values (rlbridge.contract.effects.SAMPLES) do to the toy's plan
        return {
            "model.path": {"model": "org/model"},
            "reward": {"rewards": [{"name": "digit_match", "weight": 2.0}]},
            "training.steps": {"steps": 7},
            "training.batch_size": {"prompts": 4},
            "training.seed": {"seed": 123},
            "training.lr": {"lr": 0.001},
            "training.torch_threads": {"threads": 2},
            "checkpoint.dir": {"checkpoint_dir": "/tmp/rlbridge-effect/ckpt"},
            "algorithm.group_size": {"samples": 4},
            "rollout.max_new_tokens": {"max_tokens": 32},
            "resources.gpus_per_node": REFUSED,
        }

    def translate(self, config):
        t = config.training
        return {"model": config.model.path, "rewards": [{"name": r.name, "weight": r.weight} for r in config.reward],
                "steps": t.steps, "prompts": t.batch_size, "samples": config.algorithm.group_size,
                "max_tokens": config.rollout.max_new_tokens, "seed": t.seed, "lr": t.lr, "threads": t.torch_threads,
                "checkpoint_dir": config.checkpoint.dir}

    def validate(self, plan):
        assert plan.native["steps"] >= 1

    def run(self, plan, ctx):
        from transformers import AutoTokenizer

        from rlbridge.contract.models import materialize_model

        import torch

        native = plan.native
        if native["threads"]:
            torch.set_num_threads(native["threads"])
        rng = random.Random(native["seed"])
        tokenizer = AutoTokenizer.from_pretrained(materialize_model(ctx.config))  # the engine's own tokenizer
        rows = load_rows(ctx.config.data.train, ctx.config, "data.train")
        rewards = build_rewards(ctx.config)
        for step in range(1, native["steps"] + 1):
            inputs = []
            for row in rng.sample(rows, native["prompts"]):
                for _ in range(native["samples"]):
                    ids = [rng.randrange(len(tokenizer)) for _ in range(rng.randint(1, native["max_tokens"]))]  # "sampled"
                    text = tokenizer.decode(ids, skip_special_tokens=True)
                    inputs.append(RewardInput(prompt=row["prompt"], completion=text, completion_ids=ids,
                                              answer=row.get("answer"), metadata=row))
            totals = [sum(r.weight * (s or 0.0) for r, s in zip(rewards, col)) for col in zip(*[score(r, inputs) for r in rewards])]
            mean = sum(totals) / len(totals)
            std = (sum((x - mean) ** 2 for x in totals) / len(totals)) ** 0.5
            ctx.emit_step(step, {
                "reward/mean": mean, "reward/std": std, "loss/policy": 0.0, "grad_norm": 0.0,
                "response_length/mean": sum(len(x.completion_ids) for x in inputs) / len(inputs),
                "timing/step_s": 0.01, "timing/generate_s": 0.005, "timing/update_s": 0.005,
                "throughput/tokens_per_s": 1.0, "memory/peak_mb": 1.0, "lr": native["lr"],
                **{f"reward/{r.name}/mean": mean for r in rewards},
            })


@hookimpl
def rlbridge_register_backends():
    return [ToyBackend]
"""

SUITE_USER = """
import pytest
from rlbridge.testing.suite import *  # noqa: F401,F403
from rlbridge_toy_backend import ToyBackend


@pytest.fixture
def backend():
    return ToyBackend()
"""


def _install_toy(tmp_path, source: str = TOY_BACKEND):
    """The toy as a real distribution under tmp_path/site, and its suite module under tmp_path/toy_tests."""
    site = tmp_path / "site"
    dist = site / "rlbridge_toy_engine-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlbridge-toy-engine\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[rlbridge]\ntoy = rlbridge_toy_backend\n")
    (site / "rlbridge_toy_backend.py").write_text(textwrap.dedent(source))
    tests = tmp_path / "toy_tests"
    tests.mkdir()
    (tests / "test_rlbridge_suite.py").write_text(textwrap.dedent(SUITE_USER))
    return site, tests


def _run_suite(tmp_path, site, tests, *args):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "--rootdir",
            str(tests),
            f"--junitxml={tmp_path / 'report.xml'}",
            *args,
            str(tests),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
            "RLBRIDGE_CACHE_DIR": str(tmp_path / "cache"),
        },
    )
    cases = ElementTree.parse(tmp_path / "report.xml").getroot().iter("testcase")
    outcome = {
        c.get("name"): next((child.tag for child in c if child.tag in ("failure", "error", "skipped")), "passed")
        for c in cases
    }
    return res, outcome


def test_out_of_tree_backend_passes_the_shipped_suite(tmp_path):
    from rlbridge.contract.effects import SAMPLES

    site, tests = _install_toy(tmp_path)
    res, outcome = _run_suite(tmp_path, site, tests)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    # the toy registered through its entry point, and every applicable suite test ran against it
    assert "passed" in out and "failed" not in out
    # the knob effect test ran for every canonical knob, from the toy's own declared expectations
    effects = {name: result for name, result in outcome.items() if name.startswith("test_every_knob_takes_effect[")}
    assert effects == {f"test_every_knob_takes_effect[{knob}]": "passed" for knob in SAMPLES}, effects
    assert outcome["test_knob_effects_cover_every_knob_the_backend_accepts"] == "passed"
    # requirements come from its capability table: it rejects environment and checkpointing
    assert "declares it does not run environment plugins: environment:" in out
    assert "declares it does not checkpoint or resume" in out


def test_a_wrong_declared_knob_effect_fails_the_shipped_suite(tmp_path):
    """The effect test holds the toy to what it declares: an expectation its plan does not meet fails
    naming the knob, the native key and both values."""
    wrong = TOY_BACKEND.replace('"training.lr": {"lr": 0.001}', '"training.lr": {"lr": 0.002}')
    assert wrong != TOY_BACKEND
    site, tests = _install_toy(tmp_path, wrong)
    res, outcome = _run_suite(tmp_path, site, tests, "-k", "takes_effect and training.lr and not schedule")
    assert outcome == {"test_every_knob_takes_effect[training.lr]": "failure"}, outcome
    assert "toy: training.lr=0.001 should set lr=0.002, plan has 0.001" in res.stdout, res.stdout[-3000:]
