"""The launch-script reader (rlbridge.importer.shell_reader) reads what bash reads, statically, and never hangs.

The real launch scripts under tests/fixtures/recipes/real/ (vendored from verl, OpenRLHF and TRL, see
SOURCE.md there) are the oracle's input: bash itself runs each one with `python3 -m` and `ray` replaced
by shell functions that record the launch command's argv and exit (bash_oracle.sh), and the reader's
words must equal bash's, word for word, except where the script runs a command substitution the reader does
not evaluate (`$(date ...)`), which it keeps literally with the reason. Both read a script as run from its own
directory, `$0` its real path."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlbridge.errors import ConfigError
from rlbridge.importer.recipe import find_command
from rlbridge.importer.shell_reader import read_launch

REAL = Path(__file__).parent / "fixtures" / "recipes" / "real"
# and verl's async launch scripts (tests/fixtures/recipes/async/SOURCE.md)
# and the scripts of issue 45's measure (tests/fixtures/recipes/measure/SOURCE.md)
SCRIPTS = [p for folder in ("real", "async", "measure") for p in sorted((REAL.parent / folder).glob("*/*.sh"))]
MARKERS = (
    "verl.trainer.main_ppo",
    "openrlhf.cli.train_ppo_ray",
    "verl.experimental.fully_async_policy.fully_async_main",
    "verl.experimental.one_step_off_policy.main_ppo",
)


def _read(text, env=None, source="recipe.sh"):
    return find_command(text, MARKERS, source, "launch") if env is None else _read_env(text, env, source)


def _read_env(text, env, source):
    found = read_launch(text, source, lambda w: w.endswith(MARKERS), "launch", environ=env)
    return found


def _args(text, **env):
    found = read_launch(text, "recipe.sh", lambda w: w.endswith(MARKERS), "launch", environ={"HOME": "/home/u", **env})
    return [a.text for a in found.args]


def _bash(script: Path, home: Path, env: dict) -> list[str]:
    out = home / "argv.bin"
    res = subprocess.run(
        ["bash", str(REAL / "bash_oracle.sh"), str(script), str(out)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"], "HOME": str(home), **env},
        cwd=home,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    argv = out.read_bytes().split(b"\0")[:-1]
    return [a.decode() for a in argv]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_script_reads_as_bash_reads_it(script, tmp_path):
    env = {"DEVICE": "gpu"}  # verl's grpo script asks `$(python3 -c 'import torch_npu')`, which the reader does not run
    script = script.resolve()
    bash = _bash(script, tmp_path, env)
    marker = next(i for i, a in enumerate(bash) if a.endswith(MARKERS))
    found = read_launch(
        script.read_text(),
        str(script),
        lambda w: w.endswith(MARKERS),
        "launch",
        environ={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
        script=str(script),
    )
    ours = found.args
    theirs = bash[marker + 1 :]
    assert len(ours) == len(theirs), ([a.text for a in ours], theirs)
    for mine, real in zip(ours, theirs):
        if mine.unknown is not None:  # a command substitution the reader does not run (`$(date)`): bash ran it
            assert "$(" in mine.text or "`" in mine.text, mine
            continue
        assert mine.text == real
    lines = script.read_text().splitlines()
    for a in found.args:  # every word carries the line it was written on
        assert 1 <= a.line <= len(lines)


def test_nested_and_alternative_expansions():
    script = (
        'RAY_DATA_HOME=${RAY_DATA_HOME:-"${HOME}/verl"}\n'
        "TRAIN=${TRAIN_FILE:-${RAY_DATA_HOME:-/root/verl}/data/x.parquet}\n"
        ": ${SET_ME:=/assigned}\n"
        "Q=${QUANT:-}\n"
        "NAME=run${Q:+_${Q}}${PLUS:+_never}\n"
        "N=$(( (2 + 3) * 4 / 3 ))\n"
        "python3 -m verl.trainer.main_ppo data.train_files=$TRAIN a.b=$SET_ME trainer.experiment_name=$NAME x.n=$N \\\n"
        "   x.q=${Q:+set}${Q:-unset} x.len=${#NAME} x.trim=${TRAIN%.parquet} x.base=${TRAIN##*/} "
        "x.sub=${TRAIN/data/d}\n"
    )
    assert _args(script, QUANT="fp8") == [
        "data.train_files=/home/u/verl/data/x.parquet",
        "a.b=/assigned",
        "trainer.experiment_name=run_fp8",
        "x.n=6",
        "x.q=setfp8",
        "x.len=7",
        "x.trim=/home/u/verl/data/x",
        "x.base=x.parquet",
        "x.sub=/home/u/verl/d/x.parquet",
    ]
    assert _args(script)[2] == "trainer.experiment_name=run"


def test_arrays_splice_one_word_per_element_with_its_line():
    script = (
        "DATA=(\n"
        "    data.train_batch_size=8   # a comment inside the array\n"
        '    "data.val_files=[a, b]"\n'
        ")\n"
        "EXTRA=()\n"
        'if [ "${MODE:-gpu}" = gpu ]; then\n'
        "    EXTRA+=(x.gpu=True)\n"
        "fi\n"
        'for k in 1 2; do EXTRA+=("x.k$k=$k"); done\n'
        "export LR=${LR:-1e-6}\n"
        'python3 -m verl.trainer.main_ppo "${DATA[@]}" "${EXTRA[@]}" "${EMPTY[@]}" a.lr=$LR "$@" ${#DATA[@]}\n'
    )
    found = read_launch(script, "recipe.sh", lambda w: w.endswith(MARKERS), "launch", environ={})
    assert [(a.text, a.line) for a in found.args] == [
        ("data.train_batch_size=8", 2),
        ("data.val_files=[a, b]", 3),
        ("x.gpu=True", 7),
        ("x.k1=1", 9),
        ("x.k2=2", 9),
        ("a.lr=1e-6", 11),
        ("2", 11),
    ]
    assert _args(script, MODE="npu")[2] == "x.k1=1"


# the ways launch scripts find themselves and the paths beside them (issue 45): read as bash runs them
LOCATION_IDIOMS = """\
SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
WORK_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &> /dev/null && pwd)
NAME=$(basename "$0" .sh)
REWARD=`realpath $SCRIPT_DIR/../python/reward_func.py`
LINKED=$(readlink -f "$WORK_DIR/linked")
PHYSICAL=$(cd -P "$WORK_DIR/linked" && pwd)
LOGICAL=$(cd "$WORK_DIR/linked/.." && pwd)
cd "$SCRIPT_DIR/.."
pushd python > /dev/null
IN_PYTHON=$(pwd)
popd > /dev/null
python3 -m verl.trainer.main_ppo \\
    a.reward=$WORK_DIR/examples/python/reward_func.py:reward_func \\
    a.ckpt="$(cd "$SCRIPT_DIR/../.." && pwd)/exp/ckpt" a.here=$HERE a.name=$NAME a.file=$(basename $REWARD .py) \\
    a.reward2=$REWARD a.linked=$LINKED a.physical=$PHYSICAL a.logical=$LOGICAL a.python=$IN_PYTHON \\
    a.pwd=$(pwd) a.PWD=$PWD a.dir=$(dirname "$SCRIPT_DIR/x/") a.echo="$(echo -n "$NAME" done)"
"""


def _tree(tmp_path: Path) -> Path:
    """repo/examples/scripts/run.sh beside repo/examples/python/reward_func.py, and a symlinked directory."""
    repo = tmp_path / "repo"
    (repo / "examples" / "scripts").mkdir(parents=True)
    (repo / "examples" / "python").mkdir()
    (repo / "examples" / "python" / "reward_func.py").write_text("def reward_func(*a): return 0.0\n")
    (tmp_path / "elsewhere" / "deep").mkdir(parents=True)
    (repo / "linked").symlink_to(tmp_path / "elsewhere" / "deep")
    script = repo / "examples" / "scripts" / "run.sh"
    script.write_text(LOCATION_IDIOMS)
    return script


def test_script_location_idioms_read_as_bash_runs_them(tmp_path):
    """`$(cd "$(dirname "$0")" && pwd)`, `basename`, `realpath`, `readlink -f`, `cd` / `pushd` in the script:
    evaluated, word for word what bash passes (bash_oracle.sh runs the script from its own directory)."""
    script = _tree(tmp_path).resolve()
    home = tmp_path / "home"
    home.mkdir()
    bash = _bash(script, home, {})
    found = read_launch(
        script.read_text(), str(script), lambda w: w.endswith(MARKERS), "launch", environ={}, script=str(script)
    )
    assert [a.text for a in found.args] == bash[bash.index("verl.trainer.main_ppo") + 1 :]
    assert all(a.unknown is None for a in found.args)
    values = dict(a.text.split("=", 1) for a in found.args)
    repo = script.parents[2]
    assert values["a.reward"] == f"{repo}/examples/python/reward_func.py:reward_func"
    assert values["a.ckpt"] == f"{repo}/exp/ckpt" and values["a.name"] == "run" and values["a.file"] == "reward_func"
    assert values["a.physical"] == values["a.linked"] == str((tmp_path / "elsewhere" / "deep").resolve())
    assert values["a.logical"] == str(repo) and values["a.python"] == f"{repo}/examples/python"
    assert values["a.pwd"] == values["a.PWD"] == f"{repo}/examples"  # after the script's own `cd`
    assert values["a.echo"] == "run done" and values["a.dir"] == f"{repo}/examples/scripts"
    # the same script given as a command line (no file): $0 is not its path, the launch directory is yours
    elsewhere = read_launch(
        LOCATION_IDIOMS, "<command line>", lambda w: w.endswith(MARKERS), "launch", environ={}, cwd=str(tmp_path)
    )
    assert any(a.unknown is not None for a in elsewhere.args)


def test_unknowable_substitutions_keep_their_text_and_say_why():
    script = (
        "WORK_DIR=$(cd /rlbridge-no-such-dir && pwd)\n"
        "python3 -m verl.trainer.main_ppo a.dir=$WORK_DIR/x b=`date` c=$(git rev-parse --show-toplevel)/x "
        "d=$(cd /tmp | cat) e=$(dirname /a/b/c)\n"
    )
    found = read_launch(script, "recipe.sh", lambda w: w.endswith(MARKERS), "launch", environ={})
    texts = [a.text for a in found.args]
    assert texts == [
        "a.dir=$(cd /rlbridge-no-such-dir && pwd)/x",
        "b=`date`",
        "c=$(git rev-parse --show-toplevel)/x",
        "d=$(cd /tmp | cat)",
        "e=/a/b",
    ]
    reasons = [a.unknown.reason if a.unknown else None for a in found.args]
    assert "/rlbridge-no-such-dir is not a directory on this machine" in reasons[0] and "line 1" in reasons[0]
    assert all("command substitution rlbridge import does not run" in r for r in reasons[1:4]) and reasons[4] is None
    assert any("command substitution" in note and line == 2 for line, note in found.notes)


def test_a_branch_on_an_unknown_value_names_the_line_and_what_to_set():
    script = (
        "DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}\n"
        'case "$DEVICE" in\n  npu) BS=16 ;;\n  *) BS=1024 ;;\nesac\n'
        "python3 -m verl.trainer.main_ppo data.train_batch_size=$BS\n"
    )
    with pytest.raises(ConfigError) as exc:
        _args(script)
    message = str(exc.value)
    assert message.startswith("recipe.sh:6:") and "line 2" in message and "DEVICE" not in message.split("depends")[0]
    assert "\n" not in message and "$(python3 -c" in message and "--env NAME=VALUE" in message
    assert _args(script, DEVICE="npu") == ["data.train_batch_size=16"]
    # a test bash decides from numbers: `[ x -gt 1 ] && a || b`
    assert _args('PP=2\n[ "$PP" -gt 1 ] && V=4 || V=null\npython3 -m verl.trainer.main_ppo v=$V\n') == ["v=4"]
    assert _args('PP=1\n[ "$PP" -gt 1 ] && V=4 || V=null\npython3 -m verl.trainer.main_ppo v=$V\n') == ["v=null"]


def test_exit_before_the_launch_is_reported():
    with pytest.raises(ConfigError, match=r"recipe.sh:2: the script exits here"):
        _args('if [ -z "$MODEL" ]; then\n  echo "set MODEL" >&2; exit 1\nfi\npython3 -m verl.trainer.main_ppo a=1\n')
    assert _args(
        'if [ -z "$MODEL" ]; then\n  echo "set MODEL" >&2; exit 1\nfi\npython3 -m verl.trainer.main_ppo a=$MODEL\n',
        MODEL="m",
    ) == ["a=m"]


# every redirection and job-control form, each around and after the launch command
FORMS = [
    "2>&1",
    ">&2",
    "&>>log",
    "&>log",
    "&",
    ">log 2>&1 &",
    "| tee log",
    "|& tee log",
    "2>/dev/null",
    ">|log",
    "<in",
    "<<<'x'",
    "1>&-",
    "> log",
    "; wait",
    "& wait $!",
    "&& echo done",
    "|| exit 1",
    "& disown",
    "<>f",
]


def _hang_script() -> str:
    cases = []
    for form in FORMS:
        cases.append(f"echo start {form}\npython3 -m verl.trainer.main_ppo a=1 {form}\n")
        cases.append(f"python3 -m verl.trainer.main_ppo a=1 \\\n  b=2 {form}\n")
        cases.append(f"X=1 {form}\n{form}\n")  # a bare form: an error, never a loop
        cases.append(f"python3 -m verl.trainer.main_ppo a=1 {form}")  # no final newline
    cases += [
        "&",
        "&&",
        "& &",
        "2>&",
        ">&",
        "&>",
        "<<EOF\nbody\n",
        "cat <<EOF\nno end",
        "A=(x y",
        "'",
        '"',
        "$(",
        "${",
        "`",
        "x=$((1+",
        "if true; then",
        "for x in a; do",
        "case x in",
        "(",
        ")",
        "{",
        "}",
        ";;",
        "\\",
        "\x00\x01",
        "python3 -m verl.trainer.main_ppo a=1 \\",
    ]
    return cases


def test_no_input_makes_the_reader_hang():
    """Each form in a subprocess with a time limit: a result or one ConfigError line, never a loop."""
    code = (
        "import json, sys\n"
        "from rlbridge.errors import ConfigError\n"
        "from rlbridge.importer.recipe import find_command\n"
        "out = []\n"
        "for text in json.loads(sys.stdin.read()):\n"
        "    try:\n"
        "        cmd = find_command(text, ('verl.trainer.main_ppo',), 'recipe.sh', 'launch')\n"
        "        out.append(['ok', [a.text for a in cmd.args]])\n"
        "    except ConfigError as exc:\n"
        "        out.append(['error', str(exc)])\n"
        "print(json.dumps(out))\n"
    )
    import json

    cases = _hang_script()
    res = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(cases), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(res.stdout)
    assert len(results) == len(cases)
    for text, (kind, value) in zip(cases, results):
        if kind == "error":
            assert "\n" not in value and value.startswith("recipe.sh"), (text, value)
        elif "main_ppo" in text:
            assert value[:1] == ["a=1"], (text, value)
    ok = {text: value for text, (kind, value) in zip(cases, results) if kind == "ok"}
    for form in FORMS:  # the redirection or separator is not an argument
        assert ok[f"echo start {form}\npython3 -m verl.trainer.main_ppo a=1 {form}\n"] == ["a=1"], form


def test_every_truncation_of_a_real_script_reads_or_fails_in_one_line():
    text = (REAL / "verl" / "grpo_qwen3_8b_fsdp.sh").read_text()
    cuts = list(range(0, len(text), max(len(text) // 150, 1)))
    code = (
        "import json, sys\nfrom rlbridge.errors import ConfigError\nfrom rlbridge.importer.recipe import find_command\n"
        "text, cuts = json.loads(sys.stdin.read())\nbad = []\n"
        "for cut in cuts:\n"
        "    try:\n        find_command(text[:cut], ('verl.trainer.main_ppo',), 'recipe.sh', 'launch')\n"
        "    except ConfigError as exc:\n        m = str(exc)\n        bad += [m] if '\\n' in m or not "
        "m.startswith('recipe.sh') else []\n"
        "print(json.dumps(bad))\n"
    )
    import json

    res = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([text, cuts]),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DEVICE": "gpu"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout) == []
