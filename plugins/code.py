"""Code tasks: the `code_tests` reward, which runs model-written Python against the row's tests in
the sandbox (rlbridge.engine.sandbox: no network, read-only system, private scratch, rlimits, own
PID namespace), and the `code_tasks` data source, which makes tasks with tests locally (no hub).

Rows carry `tests` (a list of Python statements, usually asserts, or its JSON text) and optionally
`code_template` (e.g. "def f(x):\\n    return {code}\\n": the completion fills {code}).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence

from rlbridge import hookimpl
from rlbridge.contract.registry import DataSourcePlugin, RewardPlugin
from rlbridge.contract.rewards import RewardInput

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.DOTALL)


def extract_code(completion: str, mode: str) -> str | None:
    """The program in a completion. code: the first ```python fenced block, else the whole text;
    expression: the longest prefix of the first line that is a Python expression (so a policy that
    has learnt the start of an answer gets the tests that start passes; None if no prefix is one)."""
    if mode == "code":
        match = _FENCE.search(completion)
        return match.group(1) if match else completion
    if mode == "expression":
        line = completion.split("\n", 1)[0][:200]
        for end in range(len(line), 0, -1):
            candidate = line[:end]
            if not candidate.strip():
                break
            try:
                compile(candidate, "<expression>", "eval")  # compiling only: nothing runs here
            except (SyntaxError, ValueError):
                continue
            return candidate
        return None
    raise ValueError(f"code_tests: extract must be 'code' or 'expression', not {mode!r}")


def code_tests(
    tests_key: str = "tests",
    extract: str = "code",
    template: str | None = None,
    wall_s: float = 10.0,
    cpu_s: int = 5,
    memory_mb: int = 512,
    nproc: int = 32,
    output_bytes: int = 65536,
):
    """Fraction of the row's tests that pass when the completion's code runs in the sandbox.
    Each call also leaves the share of its runs per sandbox outcome (ok, failed, timeout, cpu_limit,
    memory_limit, output_limit, killed) in `last_metrics`: reward/code_tests/sandbox_<outcome>.

    None (not applicable) for rows without tests. The tests run one after the other after the
    solution; those that passed before a timeout or a crash count. Scores are what the sandboxed
    harness reports on stdout, so a program that prints the harness's pass lines itself can fake
    them (reward hacking, not an escape); docs/sandbox.md says more.
    """
    if extract not in ("code", "expression"):
        raise ValueError(f"code_tests: extract must be 'code' or 'expression', not {extract!r}")
    from rlbridge.engine.sandbox import Limits, check_available

    check_available()  # a machine that cannot sandbox fails at the first call with the reason
    limits = Limits(wall_s=wall_s, cpu_s=cpu_s, memory_mb=memory_mb, nproc=nproc, output_bytes=output_bytes)

    def reward(inputs: Sequence[RewardInput]) -> list[float | None]:
        from rlbridge.engine.sandbox import OUTCOMES, run_tests

        out: list[float | None] = []
        outcomes = dict.fromkeys(OUTCOMES, 0)
        for x in inputs:
            tests = x.metadata.get(tests_key)
            if isinstance(tests, str):
                tests = json.loads(tests)
            if not tests:
                out.append(None)
                continue
            code = extract_code(x.completion, extract)
            if code is None:
                out.append(0.0)
                continue
            form = x.metadata.get("code_template") or template
            score, result = run_tests(form.format(code=code) if form else code, list(tests), limits)
            outcomes[result.outcome] += 1
            out.append(score)
        # share of the call's sandboxed runs per outcome (logged as reward/code_tests/sandbox_<outcome>)
        ran = sum(outcomes.values())
        reward.last_metrics = {f"sandbox_{k}": v / ran for k, v in outcomes.items() if ran and k != "setup_error"} if ran else {}
        return out

    reward.last_metrics = {}
    return reward


# --- tasks ----------------------------------------------------------------------------------------

_FUNCTIONS = [
    ("add_{k}", "Write a Python function add_{k}(x) that returns x plus {k}.", "x + {k}", "lambda x: x + {k}"),
    ("times_{k}", "Write a Python function times_{k}(x) that returns x multiplied by {k}.", "x * {k}", "lambda x: x * {k}"),
    ("is_multiple_of_{k}", "Write a Python function is_multiple_of_{k}(x) that returns True if x is a multiple of {k}.",
     "x % {k} == 0", "lambda x: x % {k} == 0"),
    ("digit_sum_plus_{k}", "Write a Python function digit_sum_plus_{k}(x) that returns the sum of the decimal digits of x plus {k}.",
     "sum(map(int, str(x))) + {k}", "lambda x: sum(map(int, str(x))) + {k}"),
]


def code_tasks(num_rows: int = 256, kind: str = "expression", num_tests: int = 4, seed: int = 0) -> list[dict]:
    """Small Python tasks with asserts as tests, made here (no hub).

    kind 'expression': the prompt is 'f(x) = x + k' and the completion is the expression of f
    (`code_template` wraps it as `def f(x): return ...`); learnable by the tiny builtin models, which
    first learn to start with the right number (partial credit) and then the whole expression.
    kind 'function': 'Write a Python function add_3(x) that ...': the completion is a whole function
    (extract: code), for real models."""
    if kind not in ("expression", "function"):
        raise ValueError(f"code_tasks: kind must be 'expression' or 'function', not {kind!r}")
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        k = rng.randrange(1, 10)
        xs = [0, 1, *rng.sample(range(2, 50), max(num_tests - 2, 0))][:num_tests]
        if kind == "expression":
            op = rng.choice(["+", "*"])
            truth = eval(f"lambda x: x {op} {k}")  # our own task text, not model output
            # graded: any integer gets the first test, the constant f(0) the next, x {op} k all of them
            tests = ["assert isinstance(f(1), int)", *(f"assert f({x}) == {truth(x)}" for x in xs)]
            rows.append({
                "prompt": f"f(x) = x {op} {k}\nreturn ",
                "answer": f"x {op} {k}",
                "tests": json.dumps(tests),
                "code_template": "def f(x):\n    return {code}\n",
            })
        else:
            name, text, answer, impl = rng.choice(_FUNCTIONS)
            truth = eval(impl.format(k=k))
            fn = name.format(k=k)
            rows.append({
                "prompt": text.format(k=k),
                "answer": f"def {fn}(x):\n    return {answer.format(k=k)}\n",
                "tests": json.dumps([f"assert {fn}({x}) == {truth(x)!r}" for x in xs]),
                "code_template": "",
            })
    return rows


@hookimpl
def rlbridge_register_rewards():
    return [RewardPlugin("code_tests", code_tests, "fraction of the row's tests the completion's code passes, run in the sandbox")]


@hookimpl
def rlbridge_register_data_sources():
    return [DataSourcePlugin("code_tasks", code_tasks, "Python tasks with asserts as tests (for code_tests), made locally")]
