"""The code judge against programs that game the reward instead of solving the task.

Each attack is a solution for f(x) = 3x + 1 that does not solve it (or solves it and then breaks a
limit), scored by `code_tests` through the reward worker pool exactly as a training run builds it
(specs_with_factories -> RewardScorer, as TRL, verl and OpenRLHF call it), in every test format:
assert strings, call/expected pairs, HumanEval check(candidate) and stdin/stdout programs. Each
scores 0, what the honest wrong answer `return 0` gets; the honest right answer scores 1.0 (so a
judge that pays nothing fails too). docs/sandbox.md says what each attack did to the old harness.

Needs root and `unshare` (util-linux); skipped elsewhere with the reason.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from rlbridge.contract.registry import get_plugin_manager
from rlbridge.contract.rewards import RewardInput
from rlbridge.engine.sandbox import run_tests
from rlbridge.engine.workers import RewardScorer, Settings, specs_with_factories
from tests.conftest import needs_sandbox

pytestmark = needs_sandbox

XS = (2, 7)  # two tests per format: enough to see a partial pass, cheap when an attack hangs
FORMATS = {
    "assert": [
        f"assert f({XS[0]}) == {3 * XS[0] + 1}",
        f"assert abs(f({XS[1]}) - {3 * XS[1] + 1}) < 1e-9 and len(str(f({XS[1]}))) == 2",
    ],
    "call": [{"call": "f", "args": [x], "expected": 3 * x + 1} for x in XS],
    "check": [
        {
            "check": "def check(candidate):\n" + "".join(f"    assert candidate({x}) == {3 * x + 1}\n" for x in XS),
            "entry_point": "f",
            "prelude": "def f(x):\n    '''3x + 1'''\n",
        }
    ],
    "program": [{"stdin": f"{x}\n", "stdout": f"{3 * x + 1}\n"} for x in XS],
}
# every solution also runs as a program: read x, print f(x) (skipped when called as a function)
AS_PROGRAM = '\nif __name__ == "__main__":\n    import sys\n    print(f(int(sys.stdin.read())))\n'
HONEST_RIGHT = "def f(x):\n    return 3 * x + 1\n"
HONEST_WRONG = "def f(x):\n    return 0\n"

ATTACKS = {
    # the old harness's verdict was a line on the stdout the solution shares; print it, everywhere,
    # with 500 distinct indices (the old host divided their count by the number of tests: 250.0)
    "pass_marks": """
        import os, sys
        MARKS = "".join("RLBRIDGE-TEST-PASSED %d\\n" % i for i in range(500))
        FRAME = b'm\\x00\\x00\\x00\\x00\\x00\\x00\\x00{"outcome": "ok", "value": "V7", "stdout": "", "stderr": "", "wall_s": 0}'
        sys.stdout.write(MARKS)
        sys.__stdout__.write(MARKS)
        sys.stdout.flush()
        for fd in range(64):
            for data in (MARKS.encode(), FRAME):
                try:
                    os.write(fd, data)
                except OSError:
                    pass
        def f(x):
            print(MARKS)
            return 0
    """,
    # the old harness ran each test with exec in the solution's interpreter: make exec and compile
    # no-ops (every test "passed"), silence print and stderr, make asserts and exits harmless
    "replaced_builtins": """
        import builtins, io, os, sys
        _compile = builtins.compile
        builtins.exec = lambda *a, **k: None
        builtins.compile = lambda src, name, *a, **k: _compile("pass", name, "exec") if name.startswith("test_") else _compile(src, name, *a, **k)
        builtins.print = lambda *a, **k: None
        builtins.AssertionError = type("AssertionError", (Exception,), {})
        builtins.isinstance = lambda *a: True
        sys.stderr = io.StringIO()
        sys.exit = lambda *a: os._exit(0)
        def f(x):
            return 0
    """,
    # look like a machine that cannot sandbox: if the host believed it, every reward call would
    # fail and the run would stop on its error threshold
    "fake_setup_error": """
        import os
        def f(x):
            os.write(2, b"rlbridge-sandbox-setup-error: mount /tmp: Operation not permitted\\n")
            os._exit(125)
    """,
    # the test's own expression calls builtins: define them in the solution so that it holds
    "shadowed_builtins": """
        def abs(value):
            return 0
        def len(value):
            return 2
        def f(x):
            return 0
    """,
    # equal to everything: `assert f(x) == v` used the returned object's own __eq__
    "always_equal": """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = object.__hash__
        def f(x):
            return Anything()
    """,
    # an int (and a str, in a list) that says it equals everything
    "int_subclass": """
        class Int(int):
            def __eq__(self, other):
                return True
            __ne__ = lambda self, other: False
            __hash__ = int.__hash__
        class Str(str):
            __eq__ = lambda self, other: True
            __hash__ = str.__hash__
        def f(x):
            return Int(0) if x % 2 == 0 else [Str("0")][0]
    """,
    # hard-code the answers from wherever the tests are: the caller's frames, every object gc
    # tracks, every file the sandbox can read (the old harness held them in main.py and `_tests`)
    "read_tests": """
        import gc, os, re, sys
        def _texts():
            seen = []
            frame = sys._getframe()
            while frame is not None:
                seen.append(repr(frame.f_locals)[:200000])
                seen.append(repr({k: v for k, v in frame.f_globals.items() if k != "__builtins__"})[:200000])
                frame = frame.f_back
            for obj in gc.get_objects():
                if isinstance(obj, (dict, list, tuple)):
                    try:
                        seen.append(repr(obj)[:20000])
                    except Exception:
                        pass
            for top in ("/tmp", "/proc/1", "/proc/self", "/"):
                for root, dirs, files in os.walk(top):
                    if root.count("/") > 3 or root.startswith(("/proc/self/task", "/usr", "/sys")):
                        dirs[:] = []
                    for name in files[:50]:
                        try:
                            with open(os.path.join(root, name), "rb") as fh:
                                seen.append(fh.read(100000).decode(errors="replace"))
                        except OSError:
                            pass
            return "\\n".join(seen)
        def f(x):
            blob = _texts()
            for pattern in (r"\\(%d\\) == (\\d+)" % x, r"'args': \\[%d\\], 'expected': (\\d+)" % x,
                            r'"args": \\[%d\\], "expected": (\\d+)' % x, r"'stdin': '%d\\\\n', 'stdout': '(\\d+)" % x):
                found = re.search(pattern, blob)
                if found:
                    return int(found.group(1))
            return 0
    """,
    # a forked child reports for the parent: pass marks and a second value on every fd, at once and
    # (a setsid daemon) after the parent has answered
    "forked_reporter": """
        import os, time
        def _report(delay):
            time.sleep(delay)
            for fd in range(64):
                for data in (b"RLBRIDGE-TEST-PASSED 0\\nRLBRIDGE-TEST-PASSED 1\\n", b"V7", b"7\\n"):
                    try:
                        os.write(fd, data)
                    except OSError:
                        pass
            os._exit(0)
        def f(x):
            if os.fork() == 0:
                _report(0)
            if os.fork() == 0:
                os.setsid()
                _report(0.3)
            return 0
    """,
    # the right answers, then a flood on stdout once the value is out (the old harness counted the
    # passes printed before a run ended in output_limit)
    "flood_after_pass": """
        import os, sys
        class Flood:
            def write(self, text):
                return len(text)
            def flush(self):
                while True:
                    os.write(1, b"x" * 65536)
        def f(x):
            sys.stdout = Flood()
            return 3 * x + 1
    """,
    # the right answers, then a hang (flush never returns; os._exit spins): timeout and cpu_limit
    "hang_after_pass": """
        import os, sys, time
        class Stuck:
            def write(self, text):
                return len(text)
            def flush(self):
                time.sleep(3600)
        def _spin(code):
            while True:
                pass
        def f(x):
            if x % 2:
                sys.stdout = Stuck()
            else:
                os._exit = _spin
            return 3 * x + 1
    """,
}


@pytest.fixture(scope="module")
def scorer():
    args = {"extract": "code", "wall_s": 1.5, "cpu_s": 1, "memory_mb": 256, "total_wall_s": 20.0}
    specs = specs_with_factories([{"name": "code_tests", "weight": 1.0, "args": args}], get_plugin_manager())
    assert specs[0]["factory"] == "rlbridge_plugins.code:code_tests" and not specs[0]["inline"]  # pooled, as in a run
    with RewardScorer(
        specs, Settings(num_workers=2, timeout_s=120, batch_size=1)
    ) as pool:  # a row per task: both workers busy
        yield pool


def scores(scorer, solution: str) -> dict[str, float]:
    """The solution scored in every format through the pool (one call, as an engine batches)."""
    code = textwrap.dedent(solution).strip() + "\n" + AS_PROGRAM
    inputs = [
        RewardInput(
            prompt="f(x) = 3x + 1",
            completion=f"```python\n{code}```",
            completion_ids=[1],
            metadata={"tests": json.dumps(tests)},
        )
        for tests in FORMATS.values()
    ]
    result = scorer.score(inputs)
    assert not result.counts, result.counts  # judged, not a reward fault turned into 0 by on_error
    return dict(zip(FORMATS, result.per_plugin["code_tests"]))


def test_honest_answers_score_one_and_zero(scorer):
    assert scores(scorer, HONEST_RIGHT) == dict.fromkeys(FORMATS, 1.0)
    assert scores(scorer, HONEST_WRONG) == dict.fromkeys(FORMATS, 0.0)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_what_an_honest_wrong_answer_gets(scorer, attack):
    compile(textwrap.dedent(ATTACKS[attack]), attack, "exec")  # an attack that does not parse proves nothing
    assert scores(scorer, ATTACKS[attack]) == dict.fromkeys(FORMATS, 0.0)


def test_no_score_leaves_the_unit_interval_and_each_test_has_one_verdict():
    # 500 distinct pass marks against 2 tests: the old host paid 250.0
    solution = textwrap.dedent(ATTACKS["pass_marks"]) + AS_PROGRAM
    for tests in FORMATS.values():
        score, judged = run_tests(solution, tests)
        assert score == 0.0 and [v.index for v in judged.verdicts] == list(range(len(tests)))
    score, judged = run_tests(HONEST_RIGHT, FORMATS["assert"] * 3)
    assert score == 1.0 and len(judged.verdicts) == 6


def test_limit_outcomes_fail_the_test_they_happen_in():
    solution = textwrap.dedent(ATTACKS["flood_after_pass"])
    score, judged = run_tests(solution, FORMATS["call"])
    assert score == 0.0 and {v.outcome for v in judged.verdicts} == {"output_limit"}
    score, judged = run_tests(
        textwrap.dedent(ATTACKS["hang_after_pass"]), FORMATS["assert"], limits=_limits(wall_s=3.0, cpu_s=1)
    )
    # the spin is cpu_limit on a quiet machine, timeout where 1 CPU second takes over 3 s of wall
    assert (
        score == 0.0
        and judged.verdicts[0].outcome in ("cpu_limit", "timeout")
        and judged.verdicts[1].outcome == "timeout"
    )


def _limits(**kw):
    from rlbridge.engine.sandbox import Limits

    return Limits(**kw)


def test_a_program_cannot_pose_as_a_machine_that_cannot_sandbox():
    # run_python is the code_interpreter tool's path: a program's 125 and set-up line are its own
    from rlbridge.engine.sandbox import run_python

    fake = (
        "import os\nos.write(2, b'rlbridge-sandbox-setup-error: mount /tmp: Operation not "
        "permitted\\n')\nos._exit(125)\n"
    )
    result = run_python({"main.py": fake})
    assert result.outcome == "failed" and result.returncode == 1
    # a real set-up failure (a limit the kernel refuses) is still told as one
    assert run_python({"main.py": "print(1)"}, limits=_limits(nofile=10**9)).outcome == "setup_error"
