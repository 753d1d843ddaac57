"""The telemetry sinks of one run, as pluggy plugins of the run-lifecycle hooks.

Each entry of `telemetry.sinks` is built by its factory `(run_dir, **args)` and registered, under the
name `<sink name>#<index>`, with a plugin manager of this run only (the same hook specifications as
the global one, so pluggy checks every hookimpl's signature at registration). The run calls each
lifecycle hook on the global plugins (their errors fail the run, as before) and on the sinks, one
sink at a time (step_end and checkpoint_saved reach the sinks first, so that a step written to
metrics.jsonl reaches them even when a plugin then fails the run): a sink that raises is reported on stderr with its
name, recorded in
summary.json (`sink_errors`), closed and unregistered; metrics.jsonl, samples.jsonl and the other
sinks are not affected. Sinks run in the user's process only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pluggy

from rlbridge.contract import hookspecs
from rlbridge.errors import ConfigError


class RunSinks:
    def __init__(self, sinks: list[tuple[str, Any]]) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.errors: list[dict[str, str]] = []
        for name, sink in sinks:
            try:
                self.pm.register(sink, name=name)
            except pluggy.PluginValidationError as exc:
                raise ConfigError(
                    f"telemetry.sinks: sink '{name}' does not implement the lifecycle hooks: {exc}"
                ) from exc

    @classmethod
    def build(cls, config, run_dir: Path, plugins) -> RunSinks:
        made = []
        for i, spec in enumerate(config.telemetry.sinks):
            factory = plugins.get("telemetry_sink", spec.name, f"telemetry.sinks[{i}].name").factory
            try:
                made.append((f"{spec.name}#{i}", factory(run_dir=run_dir, **spec.args)))
            except TypeError as exc:
                raise ConfigError(f"telemetry.sinks[{i}].args: {exc}") from exc
        return cls(made)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.pm.list_name_plugin()]

    def call(self, hook: str, **kwargs: Any) -> None:
        """Call `hook` on every sink that implements it, in registration order, each on its own."""
        for impl in list(getattr(self.pm.hook, hook).get_hookimpls()):  # registration order
            try:
                impl.function(*(kwargs[arg] for arg in impl.argnames))
            except Exception as exc:  # a sink never takes the run down with it
                self._failed(impl.plugin_name, impl.plugin, hook, exc)

    def _failed(self, name: str, sink: Any, hook: str, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        self.errors.append({"sink": name, "hook": hook, "error": message})
        print(
            f"rlbridge: telemetry sink '{name}' failed in {hook} ({message}); it is off for the rest of the run",
            file=sys.stderr,
            flush=True,
        )
        self.pm.unregister(name=name)
        close = getattr(sink, "close", None)
        if callable(close):
            try:
                close()  # flush what it already wrote
            except Exception:
                pass
