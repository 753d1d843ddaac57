"""Validating an OpenRLHF argument list with the installed CLI's own parser and checks, without
launching anything and without importing torch, Ray or vLLM.

OpenRLHF builds its parser inside `if __name__ == "__main__":` of openrlhf/cli/train_ppo_ray.py and
offers no function to get it. rlbridge reads that block from the installed file (so it is always
the installed version's parser, never a copy), runs the statements that build the parser, parses
the argument list, then runs OpenRLHF's own post-parse checks with `train` replaced by a stub.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from rlbridge.errors import ConfigError


class _ArgumentError(Exception):
    pass


def cli_file(module: str = "train_ppo_ray") -> Path:
    spec = importlib.util.find_spec("openrlhf")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("openrlhf is not installed in this environment")
    return Path(list(spec.submodule_search_locations)[0]) / "cli" / f"{module}.py"


def _load_by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _main_block(tree: ast.Module) -> ast.If:
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"') == '__name__ == "__main__"':
            return node
    raise ConfigError("openrlhf's train_ppo_ray.py has no __main__ block: this OpenRLHF layout is not supported")


def _strip_openrlhf_config_import(body: list[ast.stmt]) -> list[ast.stmt]:
    """`from openrlhf.utils.config import hierarchize` would import openrlhf.utils (torch, DeepSpeed);
    the namespace gets the function from the file instead."""
    out = []
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module == "openrlhf.utils.config":
            continue
        out.append(node)
    return out


def parse(argv: list[str], module: str = "train_ppo_ray") -> tuple[Any, dict[str, Any]]:
    """Parse `argv` with the installed CLI's parser and run its post-parse checks.
    Returns (args as OpenRLHF's train() would receive them, the namespace used)."""
    path = cli_file(module)
    tree = ast.parse(path.read_text(), str(path))
    main = _main_block(tree)
    split = next(
        (
            i
            for i, node in enumerate(main.body)
            if isinstance(node, ast.Assign) and "parse_args" in ast.unparse(node.value)
        ),
        None,
    )
    if split is None:
        raise ConfigError(f"{path}: no parse_args() call in the __main__ block: this OpenRLHF layout is not supported")
    captured: list[Any] = []
    ns: dict[str, Any] = {"argparse": argparse, "os": os, "datetime": datetime, "__name__": "rlbridge_openrlhf_cli"}
    config_py = path.parent.parent / "utils" / "config.py"
    if config_py.exists():
        ns["hierarchize"] = _load_by_path("rlbridge_openrlhf_config", config_py).hierarchize
    exec(compile(ast.Module(main.body[:split], []), str(path), "exec"), ns)
    parser = ns["parser"]

    def error(message: str):
        raise _ArgumentError(message)

    parser.error = error
    try:
        ns["args"] = parser.parse_args(argv)
    except _ArgumentError as exc:
        raise ConfigError(f"OpenRLHF rejected the arguments: {exc}") from exc
    ns["train"] = captured.append
    rest = _strip_openrlhf_config_import(main.body[split + 1 :])
    try:
        with contextlib.redirect_stdout(sys.stderr):  # its warnings must not mix into a printed plan
            exec(compile(ast.Module(rest, []), str(path), "exec"), ns)
    except AssertionError as exc:
        raise ConfigError(f"OpenRLHF's own checks failed: {exc}") from exc
    if not captured:
        raise ConfigError("OpenRLHF's __main__ block did not reach train(args)")
    return captured[0], ns


def validate_argv(native: dict[str, Any], run_dir: str = "/tmp/rlbridge-plan", model_dir: str | None = None) -> Any:
    from rlbridge_adapters.openrlhf.backend import DEFAULT_PROMPT_TOKENS, MAX_LEN_AUTO

    argv = [
        a.replace("<run_dir>", run_dir).replace("<model_dir>", model_dir or native["model"]["path"])
        for a in native["args"]
    ]
    argv = [str(DEFAULT_PROMPT_TOKENS + _new_tokens(argv)) if a == MAX_LEN_AUTO else a for a in argv]
    args, _ = parse(argv)
    return args


def _new_tokens(argv: list[str]) -> int:
    for i, arg in enumerate(argv[:-1]):
        if arg.endswith("max_new_tokens"):
            return int(argv[i + 1])
    return 0
