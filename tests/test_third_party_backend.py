"""A backend package outside rlbridge's tree runs the shipped conformance suite against itself.

The package is installed into a private site directory as a real distribution (dist-info with an
`rlbridge` entry point and a version), exactly as `pip install` would leave it, and its own test
module is the three lines a third party writes: import the suite, name the backend. Its "engine" is
a toy that trains in-process (samples token ids, decodes them with the model's tokenizer, scores
them through rlbridge's reward shim, reports
canonical metrics), enough to prove the core contract; it proves no real engine.
"""

import subprocess
import sys
import textwrap

TOY_BACKEND = '''
import random

from rlbridge import hookimpl
from rlbridge.contract.backend import Backend, canonical_knobs, honoured, rejected
from rlbridge.contract.rewards import RewardInput, build_rewards, score
from rlbridge.contract.data import load_rows

HONOURED = {"model.path", "data.train", "reward", "training.steps", "training.batch_size",
            "training.seed", "training.lr", "training.torch_threads", "checkpoint.dir", "algorithm.group_size", "rollout.max_new_tokens", "resources.gpus_per_node"}


class ToyBackend(Backend):
    name = "toy"
    distribution = "rlbridge-toy-engine"
    supported_versions = ">=1.0,<2"

    def capabilities(self):
        return [honoured(k, k) if k in HONOURED else rejected(k, "the toy engine has no such setting; leave it at its default")
                for k in canonical_knobs()]

    def translate(self, config):
        t = config.training
        return {"steps": t.steps, "prompts": t.batch_size, "samples": config.algorithm.group_size,
                "max_tokens": config.rollout.max_new_tokens, "seed": t.seed}

    def validate(self, plan):
        assert plan.native["steps"] >= 1

    def run(self, plan, ctx):
        from transformers import AutoTokenizer

        from rlbridge.contract.models import materialize_model

        native = plan.native
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
                "throughput/tokens_per_s": 1.0, "memory/peak_mb": 1.0, "lr": 0.001,
                **{f"reward/{r.name}/mean": mean for r in rewards},
            })


@hookimpl
def rlbridge_register_backends():
    return [ToyBackend]
'''

SUITE_USER = '''
import pytest
from rlbridge.testing.suite import *  # noqa: F401,F403
from rlbridge_toy_backend import ToyBackend


@pytest.fixture
def backend():
    return ToyBackend()
'''


def test_out_of_tree_backend_passes_the_shipped_suite(tmp_path):
    site = tmp_path / "site"
    dist = site / "rlbridge_toy_engine-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlbridge-toy-engine\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[rlbridge]\ntoy = rlbridge_toy_backend\n")
    (site / "rlbridge_toy_backend.py").write_text(textwrap.dedent(TOY_BACKEND))
    tests = tmp_path / "toy_tests"
    tests.mkdir()
    (tests / "test_rlbridge_suite.py").write_text(textwrap.dedent(SUITE_USER))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--rootdir", str(tests), str(tests)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(site), "RLBRIDGE_CACHE_DIR": str(tmp_path / "cache")},
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    # the toy registered through its entry point, and every applicable suite test ran against it
    assert "passed" in out and "failed" not in out
    # requirements come from its capability table: it rejects environment and checkpointing
    assert "declares it does not run environment plugins: environment:" in out
    assert "declares it does not checkpoint or resume" in out
