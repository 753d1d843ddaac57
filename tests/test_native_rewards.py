"""Native reward functions (verl, OpenRLHF, TRL conventions) adapted to the neutral interface, and
refused at plan time when their signature fits no convention."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rlbridge.contract.native_rewards import check_reward_spec, metric_means, reward_fn
from rlbridge.contract.rewards import RewardInput
from rlbridge.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "native_rewards"


def inputs():
    return [
        RewardInput(
            prompt="7777",
            completion="777x",
            completion_ids=[5, 5, 5, 9, 3],
            answer="7",
            metadata={"answer": "7", "topic": "a"},
        ),
        RewardInput(
            prompt="2222", completion="", completion_ids=[3], answer="2", metadata={"answer": "2", "topic": "b"}
        ),
        RewardInput(
            prompt="1111", completion="11", completion_ids=[8], answer=None, metadata={"answer": None, "topic": "c"}
        ),
    ]


def test_verl_compute_score_dict_gives_score_and_metrics():
    fn = reward_fn({"native": "verl", "function": f"{EXAMPLES}/verl_compute_score.py:compute_score"}, None, "reward[0]")
    out = fn(inputs())
    assert list(out)[:2] == [0.75, 0.0]
    assert out.metrics["chars"] == [4.0, 0.0, 2.0]
    assert metric_means(out) == {"chars": 2.0}


def test_openrlhf_reward_func_batched_tensors():
    pytest.importorskip("torch")
    fn = reward_fn(
        {"native": "openrlhf", "function": f"{EXAMPLES}/openrlhf_reward_func.py:reward_func"}, None, "reward[0]"
    )
    out = fn(inputs()[:2])
    assert list(out) == [0.75, 0.0]
    assert out.metrics["hit"] == [1.0, 0.0]


def test_trl_function_gets_engine_ids_columns_and_none():
    fn = reward_fn({"native": "trl", "function": f"{EXAMPLES}/trl_reward.py:digit_share"}, None, "reward[0]")
    # 3 answer digits over 5 engine tokens (not over the 4 characters): completion_ids reached it
    assert list(fn(inputs())) == [0.6, 0.0, None]


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "r.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_trl_log_metric_and_args(tmp_path):
    path = write(
        tmp_path,
        """
        def f(completions, topic, scale, log_metric, **kwargs):
            log_metric("seen", len(completions))
            return [scale * (t == "a") for t in topic]
    """,
    )
    out = reward_fn({"native": "trl", "function": f"{path}:f", "args": {"scale": 2.0}}, None, "reward[0]")(inputs())
    assert list(out) == [2.0, 0.0, 0.0] and out.metrics["seen"] == [3.0] * 3


def test_trl_defaulted_parameter_the_rows_lack_keeps_its_default(tmp_path):
    path = write(
        tmp_path,
        """
        def f(completions, topic, missing, scale=3.0, **kwargs):
            assert missing == [None] * len(completions)  # required and absent: None per sample
            return [scale * (t == "a") for t in topic]
    """,
    )
    out = reward_fn({"native": "trl", "function": f"{path}:f"}, None, "reward[0]")(inputs())
    assert list(out) == [3.0, 0.0, 0.0]


def test_async_verl_function(tmp_path):
    path = write(
        tmp_path,
        """
        async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return float(data_source == "rlbridge") + len(solution_str)
    """,
    )
    assert list(reward_fn({"native": "verl", "function": f"{path}:compute_score"}, None, "r")(inputs())) == [
        5.0,
        1.0,
        3.0,
    ]


def refused(tmp_path, family: str, body: str, expected: str) -> None:
    """A function `body` defines, given as a native: `family` reward, is refused at plan time with `expected` in
    the message, which says what the convention expected."""
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        check_reward_spec({"native": family, "function": f"{path}:{body.split('(')[0][4:]}"}, None, "reward[1]")
    message = str(err.value)
    assert message.startswith("reward[1].function: ") and expected in message
    assert f"a native: {family} reward is " in message  # says what it expected


@pytest.mark.parametrize(
    "body, expected",
    [
        ("def compute_score(text, truth): return 0.0", "has no 'solution_str' parameter"),
        ("def compute_score(solution_str, ground_truth, tokenizer): return 0.0", "requires tokenizer"),
    ],
)
def test_verl_signature_that_fits_no_convention_is_refused(tmp_path, body, expected):
    refused(tmp_path, "verl", body, expected)


def test_openrlhf_signature_that_fits_no_convention_is_refused(tmp_path):
    body = "def reward_func(queries, prompts): return {}"
    refused(tmp_path, "openrlhf", body, "cannot be called as reward_func(queries, prompts, labels)")


@pytest.mark.parametrize(
    "body, expected",
    [
        ("def f(samples): return []", "has no 'completions' parameter"),
        ("def f(completions, /): return []", "positional-only"),
    ],
)
def test_trl_signature_that_fits_no_convention_is_refused(tmp_path, body, expected):
    refused(tmp_path, "trl", body, expected)


def test_missing_file_and_name(tmp_path):
    with pytest.raises(ConfigError, match=r"reward\[0\]\.function: no file"):
        check_reward_spec({"native": "trl", "function": "nope/missing.py:f"}, None, "reward[0]")
    path = write(tmp_path, "def other(completions): return []")
    with pytest.raises(ConfigError, match="has no 'f'; callables there: other"):
        check_reward_spec({"native": "trl", "function": f"{path}:f"}, None, "reward[0]")


@pytest.mark.engine
def test_three_native_families_unchanged_train_together_on_trl(tmp_path):
    """CI's end-to-end proof of each signature family (TRL, the main environment): the three example
    files, unchanged, as three reward entries; each one's own metric must rise."""
    import json

    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    config = load_config(EXAMPLES / "all.yaml", [f"output_dir={tmp_path}/run", "training.steps=30"])
    assert train(config, progress=False)["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 30
    for name in ("compute_score", "reward_func", "digit_share"):
        series = [r[f"reward/{name}/mean"] for r in rows]
        first, last = sum(series[:5]) / 5, sum(series[-5:]) / 5
        assert last > first + 0.05, f"{name}: {first:.3f} -> {last:.3f}"
    assert all("reward/compute_score/chars" in r and "reward/reward_func/hit" in r for r in rows)  # their extra metrics


def test_a_backend_declares_its_own_convention_and_an_undeclared_one_is_refused_by_name(tmp_path):
    """The conventions come from the backends (Backend.native_reward_convention), so a third-party
    backend brings its own; 'native' names one of the registered backends that declare one."""
    from types import SimpleNamespace

    from rlbridge import hookimpl
    from rlbridge.contract.native_rewards import NativeConvention, Scores, conventions, keyword_problem
    from rlbridge.contract.registry import PluginManager
    from rlbridge_adapters.trl.backend import TRLBackend

    class ToyBackend(TRLBackend):  # the capability table does not matter here
        name = "toy"

        def native_reward_convention(self):
            return NativeConvention(
                "score(texts) -> list[float]",
                keyword_problem("texts"),
                lambda fn, inputs, args: Scores(fn(texts=[x.completion for x in inputs], **args)),
            )

    pm = PluginManager(load_entry_points=False)
    pm.register(SimpleNamespace(rlbridge_register_backends=hookimpl(lambda: [ToyBackend, TRLBackend])), "toy-plugin")
    assert sorted(conventions(pm)) == ["toy", "trl"]
    path = write(
        tmp_path,
        """
        def score(texts, bonus=0.0):
            return [len(t) + bonus for t in texts]

        def other(completions):
            return [0.0 for _ in completions]
    """,
    )
    out = reward_fn({"native": "toy", "function": f"{path}:score", "args": {"bonus": 0.5}}, pm, "reward[0]")(inputs())
    assert list(out) == [4.5, 0.5, 2.5]
    with pytest.raises(ConfigError, match="has no 'texts' parameter.*a native: toy reward is score\\(texts\\)"):
        check_reward_spec({"native": "toy", "function": f"{path}:other"}, pm, "reward[0]")
    with pytest.raises(
        ConfigError, match=r"reward\[0\].native: 'verl' is not a reward convention; use one of toy, trl"
    ):
        check_reward_spec({"native": "verl", "function": f"{path}:score"}, pm, "reward[0]")
