"""The code_interpreter environment on OpenRLHF (issue 24): OpenRLHF's agent executor has no tool-call
parsing, so rlbridge's agent (adapters/openrlhf/agent.py) parses the policy's hermes tool calls, runs
the `python` tool in the code sandbox through the worker pool and returns its output as the turn's
environment feedback; the final answer is judged on the host. OpenRLHF's own
MultiTurnAgentExecutor.execute drives the episodes (budgets, observation tokens, action ranges);
only the vLLM engine is scripted, as in test_openrlhf_token_ids_in_env.py. Then a 2-step run of
configs/code_interpreter.yaml on OpenRLHF (tiny-digits writes no tool calls: it proves the run
path, the scripted episodes prove the tool path).

Needs root and `unshare` (util-linux); skipped elsewhere with the reason.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from .openrlhf_runtime import require_openrlhf_runtime

require_openrlhf_runtime()

from tests.conftest import REPO, needs_sandbox  # noqa: E402
from rlbridge.engine.events import EVENTS_ENV, REWARDS_ENV  # noqa: E402
from rlbridge.engine.workers import reset_engine_scorer  # noqa: E402

pytestmark = needs_sandbox

ROW = {
    "prompt": "f(x) = x * 7\nreturn ",
    "answer": "x * 7",
    "code_template": "def f(x):\n    return {code}\n",
    "tests": json.dumps(["assert isinstance(f(1), int)", "assert f(0) == 0", "assert f(3) == 21", "assert f(4) == 28"]),
}
SPEC = {"name": "code_interpreter", "args": {"extract": "expression", "wall_s": 3, "cpu_s": 1}, "max_turns": 3}


def tool_call(code: str) -> str:
    return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"


class ScriptedVLLM:
    """The engine's generate: each episode's turns in order (an episode is told apart by its prompt)."""

    def __init__(self, tok, turns_by_prompt: dict[str, list[str]]):
        self.tok, self.turns = tok, {p: list(t) for p, t in turns_by_prompt.items()}

    async def generate(self, prompt_ids, sampling_params, multi_modal_data=None):
        text = self.tok.decode(prompt_ids)
        prompt = next(p for p in self.turns if text.startswith(p))
        turn = self.turns[prompt].pop(0)
        ids = self.tok(turn, add_special_tokens=False)["input_ids"][: sampling_params.max_tokens]
        await asyncio.sleep(0)
        out = SimpleNamespace(token_ids=ids, text=self.tok.decode(ids), finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


@pytest.fixture
def episodes(tmp_path, monkeypatch):
    """Runs episodes (prompt -> the policy's turns) through rlbridge's AgentExecutor at once, as
    OpenRLHF's vLLM actor gathers them; returns their outputs, the tokenizer and the events."""
    from rlbridge.contract.models import builtin_model_dir
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge_adapters.openrlhf.agent import CHAT_ENV, ENVIRONMENT_ENV, AgentExecutor
    from rlbridge_adapters.openrlhf.reward import MODEL_ENV
    from transformers import AutoTokenizer

    model = (
        get_plugin_manager().get("model_builder", "tiny-digits", "model.path").build(builtin_model_dir("tiny-digits"))
    )
    tok = AutoTokenizer.from_pretrained(model)
    monkeypatch.setenv(MODEL_ENV, str(model))
    monkeypatch.setenv(ENVIRONMENT_ENV, json.dumps(SPEC))
    monkeypatch.setenv(CHAT_ENV, "0")
    monkeypatch.setenv(REWARDS_ENV, "[]")
    monkeypatch.setenv(EVENTS_ENV, str(tmp_path / "events.jsonl"))
    # process workers, as a run's default: the tools and the judged step run in the pool
    monkeypatch.setenv("RLBRIDGE_ROLLOUT_WORKERS", json.dumps({"mode": "process", "num_workers": 2, "timeout_s": 60}))
    reset_engine_scorer()

    def play(turns_by_prompt: dict[str, list[str]]):
        engine, executor = ScriptedVLLM(tok, turns_by_prompt), AgentExecutor()

        async def all_at_once():
            return await asyncio.gather(
                *[
                    executor.execute(
                        prompt,
                        json.dumps({"prompt": prompt, "answer": ROW["answer"], "row": {**ROW, "prompt": prompt}}),
                        # max_tokens as a run sets it (OpenRLHF 0.9.10's executor subtracts it from max_length)
                        SimpleNamespace(max_tokens=256, logprobs=None),
                        1024,
                        tok,
                        engine,
                    )
                    for prompt in turns_by_prompt
                ]
            )

        outs = asyncio.run(all_at_once())
        events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
        return outs, tok, events

    yield play
    reset_engine_scorer()


def fed_back(out, tok) -> str:
    """The text OpenRLHF appended between the policy's turns (outside every action range: not trained on)."""
    ids, ranges = out["observation_tokens"], out["action_ranges"]
    return "".join(tok.decode(ids[end:start]) for (_, end), (start, _) in zip(ranges, ranges[1:]))


def test_the_tool_runs_in_the_sandbox_and_the_answer_is_judged(episodes):
    prompt = ROW["prompt"]
    outs, tok, events = episodes({prompt: [tool_call("import os\nprint(6 * 7, os.getuid() != 0)"), "x * 7"]})
    out = outs[0]
    assert len(out["action_ranges"]) == 2  # the tool call's turn, then the answer
    assert "42 True" in fed_back(out, tok)  # the tool's output, run under an unprivileged uid
    assert out["reward"] == 1.0 and out["extra_logs"]["tool_calls"].item() == 1.0
    assert [e["total"] for e in events if e["kind"] == "reward_sample"] == [1.0]


def test_the_tool_sees_no_tests_and_printed_pass_marks_score_zero(episodes):
    probe = (
        "import gc, os\ndef seen():\n    needle = ' '.join(['assert', 'f('])\n"
        "    files = [open(os.path.join(r, n)).read() for r, d, f in os.walk('/tmp') for n in f]\n"
        "    return sum(needle in repr(o) for o in gc.get_objects()), sum(needle in t for t in files)\n"
        "print('asserts seen:', *seen())"
    )
    outs, tok, _ = episodes({ROW["prompt"]: [tool_call(probe), "print('RLBRIDGE-TEST-PASSED 0')"]})
    assert "asserts seen: 0 0" in fed_back(outs[0], tok)
    assert outs[0]["reward"] == 0.0


def test_episodes_tool_calls_run_at_once(episodes):
    # two episodes call a tool that sleeps: each run prints when it started and ended
    code = "import time\nstart = time.time()\ntime.sleep(0.6)\nprint('ran', start, time.time())"
    prompts = [ROW["prompt"], "g " + ROW["prompt"]]
    outs, tok, _ = episodes({p: [tool_call(code), "x * 7"] for p in prompts})
    spans = [[float(v) for v in fed_back(out, tok).split("ran ")[1].split()[:2]] for out in outs]
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans  # they overlapped, not one after the other
    assert [out["reward"] for out in outs] == [1.0, 1.0]


@pytest.mark.engine
def test_code_interpreter_runs_two_steps_on_openrlhf(tmp_path):
    from rlbridge.run.loading import load_config
    from rlbridge.run.runner import train

    overrides = [
        "backend=openrlhf",
        "engine_env=current",
        f"output_dir={tmp_path}/run",
        "training.steps=2",
        "training.batch_size=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=8",
    ]
    summary = train(load_config(REPO / "configs" / "code_interpreter.yaml", overrides), progress=False)
    assert summary["status"] == "completed", summary
    assert "--train.agent_func_path" in (tmp_path / "run" / "plan.yaml").read_text()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(0.0 <= r["reward/mean"] <= 1.0 for r in rows), rows
