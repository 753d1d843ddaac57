"""Checking a plugin's `args` against its factory before anything starts.

Reward, environment, data-source and telemetry-sink entries carry `args` that rlbridge passes as
keyword arguments to the plugin's factory, possibly in another process and minutes later. They are
bound to the factory's signature at plan time (unknown or missing arguments), and values are checked
against the parameters' type annotations where those resolve (pydantic does the checking), so that a
typo is one line naming the field, exit 2, instead of a TypeError traceback from inside a run.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Callable

from rlbridge.errors import ConfigError


def check_args(
    factory: Callable[..., Any],
    args: dict[str, Any],
    field_name: str,
    plugin: str,
    injected: dict[str, Any] | None = None,
) -> None:
    """Raise ConfigError naming `field_name` unless factory(**injected, **args) binds and every value
    fits its parameter's annotation. `injected` are the arguments rlbridge itself passes (run_dir, seed)."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check against
        return
    params = signature.parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    accepted = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    shown = ", ".join(n for n in accepted if n not in (injected or {})) or "no arguments"
    if not takes_kwargs:
        unknown = sorted(set(args) - set(accepted))
        if unknown:
            raise ConfigError(
                f"{field_name}: '{plugin}' does not take {', '.join(map(repr, unknown))}; it takes {shown}"
            )
    call = {**(injected or {}), **args}
    try:
        signature.bind(**{k: v for k, v in call.items() if k in params or takes_kwargs})
    except TypeError as exc:
        raise ConfigError(
            f"{field_name}: '{plugin}' cannot be called with these args ({exc}); it takes {shown}"
        ) from None
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # annotations that do not resolve here: the binding check above stands
        return
    from pydantic import TypeAdapter, ValidationError

    for name, value in args.items():
        if name not in hints or name not in params:
            continue
        try:
            TypeAdapter(hints[name]).validate_python(value, strict=False)
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            raise ConfigError(f"{field_name}.{name}: {problem} (got {value!r}) for '{plugin}'") from None
        except Exception:  # a type pydantic cannot build a validator for
            continue
