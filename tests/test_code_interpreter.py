"""The code_interpreter environment on TRL (adapters/trl/environment.py, TRL's own GRPOTrainer): the
policy's `python` tool call runs in the sandbox and its output comes back as the tool message; the
final answer is judged like code_tests. Only the policy is scripted (the trainer's one-turn
generation returns fixed token ids), as in adapters/trl/tests/test_trl_environment.py.

Needs root and `unshare` (util-linux) and TRL; skipped elsewhere with the reason.
"""

import json
import os

import pytest

trl = pytest.importorskip("trl")

from rlbridge.contract.models import builtin_model_dir  # noqa: E402
from rlbridge.contract.registry import get_plugin_manager  # noqa: E402
from rlbridge_adapters.trl.environment import EnvironmentRollout, trainer_class  # noqa: E402
from rlbridge_plugins.code import CodeInterpreter  # noqa: E402
from tests.conftest import needs_sandbox  # noqa: E402

pytestmark = needs_sandbox

ROW = {
    "prompt": "f(x) = x * 7\nreturn ",
    "answer": "x * 7",
    "code_template": "def f(x):\n    return {code}\n",
    "tests": json.dumps(["assert isinstance(f(1), int)", "assert f(0) == 0", "assert f(3) == 21", "assert f(4) == 28"]),
}


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast

    model = (
        get_plugin_manager().get("model_builder", "tiny-digits", "model.path").build(builtin_model_dir("tiny-digits"))
    )
    tok = PreTrainedTokenizerFast.from_pretrained(model)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("out")),
        max_completion_length=512,
        num_generations=2,
        per_device_train_batch_size=2,
        use_cpu=True,
        report_to="none",
        max_steps=1,
    )
    cls = trainer_class(trl.GRPOTrainer)
    return cls(
        model=model,
        reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_list([ROW]),
        processing_class=tok,
        rollout_func=lambda prompts, trainer: None,
    )


def play(trainer, turns, episodes=1):
    """Episodes with the policy's turns scripted (the same for each); the rollout's output."""
    tok = trainer.processing_class
    queue = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in turns]

    def generate(prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        ids = queue.pop(0)
        return [list(ids) for _ in prompt_ids], None

    trainer._generate_single_turn = generate
    rollout = EnvironmentRollout(
        {"name": "code_interpreter", "args": {"extract": "expression", "wall_s": 3, "cpu_s": 1}, "max_turns": 3},
        "prompt",
        use_chat_template=False,
    )
    trainer._rlbridge_rows = [ROW] * episodes
    return rollout([ROW["prompt"]] * episodes, trainer)


def test_tool_runs_in_the_sandbox_and_the_answer_is_judged(trainer):
    tool = (
        '<tool_call>{"name": "python", "arguments": {"code": "import os\\nprint(6 * 7, os.getuid() != 0)"}}</tool_call>'
    )
    out = play(trainer, [tool, "x * 7"])
    text = trainer.processing_class.decode(out["completion_ids"][0])
    assert "42 True" in text  # the tool's output, as the tool message, run under an unprivileged uid
    assert out["rlbridge_tool_calls"] == [1.0] and out["rlbridge_turns"] == [2.0]
    assert out["rlbridge_environment_reward"] == [1.0]


def test_the_tool_sees_no_tests_and_the_answer_cannot_fake_a_pass(trainer):
    # the tool looks for the row's tests everywhere it can read; then the answer prints pass marks
    # the needle is made at run time (join: the compiler folds 'a' + 'b'): the probe holds no copy
    probe = (
        "import gc, os\\ndef seen():\\n    needle = ' '.join(['assert', 'f('])\\n"
        "    files = [open(os.path.join(r, n)).read() for r, d, f in os.walk('/tmp') for n in f]\\n"
        "    return sum(needle in repr(o) for o in gc.get_objects()), sum(needle in t for t in files)\\n"
        "print('asserts seen:', *seen())"
    )
    tool = '<tool_call>{"name": "python", "arguments": {"code": "' + probe + '"}}</tool_call>'
    out = play(trainer, [tool, "print('RLBRIDGE-TEST-PASSED 0')"])
    text = trainer.processing_class.decode(out["completion_ids"][0])
    assert "asserts seen: 0 0" in text, text
    assert out["rlbridge_environment_reward"] == [0.0]


def test_a_turns_tool_calls_run_at_once_in_the_worker_pool(trainer):
    # two episodes call the tool in the same turn: each run prints when it started and ended
    code = "import time\\nstart = time.time()\\ntime.sleep(0.6)\\nprint('ran', start, time.time())"
    tool = '<tool_call>{"name": "python", "arguments": {"code": "' + code + '"}}</tool_call>'
    out = play(trainer, [tool, "x * 7"], episodes=2)
    tok = trainer.processing_class
    spans = [[float(v) for v in tok.decode(ids).split("ran ")[1].split()[:2]] for ids in out["completion_ids"]]
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans  # they overlapped
    assert out["rlbridge_environment_reward"] == [1.0, 1.0]


class WorkerPid(CodeInterpreter):
    """code_interpreter with a tool that says which process ran it."""

    tools = ("python", "pid")

    def pid(self) -> str:
        """The process id of the process that runs this tool."""
        return str(os.getpid())


def test_tools_run_in_a_worker_process_and_keep_the_episodes_state():
    from rlbridge.engine.environment_steps import call_environment_tool
    from rlbridge.engine.workers import RewardScorer, Settings

    env = WorkerPid()
    env.reset(ROW, ROW["prompt"])
    with RewardScorer([], Settings(num_workers=1)) as scorer:
        assert call_environment_tool(env, "pid", {}, scorer) != str(os.getpid())
        assert "42" in call_environment_tool(env, "python", {"code": "print(6 * 7)"}, scorer)
    assert env.tests == json.loads(ROW["tests"])  # the state that came back
