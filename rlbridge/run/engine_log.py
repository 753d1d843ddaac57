"""An engine that runs in the user's process (TRL, usually) writes its warnings, log lines and progress
bars to RUN_DIR/engine.log, where an engine process's output goes too (rlbridge.run.launch), so that the
console shows rlbridge's own lines: the progress bar, rlbridge's warnings, the summary."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


class EngineStderr:
    """sys.stderr while the engine runs here: what is written goes to the log. `rich_proxied_file` is
    rich's own name for the stream behind a proxy (rich.file_proxy.FileProxy): rlbridge's rich console
    (the progress bar) follows it to the console, and so does RunContext.warn."""

    def __init__(self, log: IO[str], console: IO[str]) -> None:
        self._log = log
        self.rich_proxied_file = console

    def write(self, text: str) -> int:
        return self._log.write(text)

    def close_log(self, then: IO[str]) -> None:
        """The block ended: whoever kept this stream (a handler or library that saved sys.stderr while the
        engine ran, found again by the next run's handler.setStream) writes to `then` from now on."""
        self._log = then

    def flush(self) -> None:
        self._log.flush()

    def isatty(self) -> bool:  # progress bars written here draw once, not as a live line
        return False

    def fileno(self) -> int:
        return self._log.fileno()

    def __getattr__(self, name: str):  # encoding, errors, writelines...
        return getattr(self._log, name)


def console_stream() -> IO[str]:
    """The stream rlbridge's own lines go to: the console, also while an engine runs here."""
    return getattr(sys.stderr, "rich_proxied_file", sys.stderr)


@contextmanager
def engine_output_to(path: Path) -> Iterator[None]:
    """While the block runs, what the engine writes to stderr goes to `path` (appended): Python's warnings,
    progress bars and log handlers writing to sys.stderr (the engine's libraries' included), and file
    descriptor 2 itself, which the processes it starts (reward workers) inherit. Then everything is put back."""
    previous = sys.stderr
    console = console_stream()
    sys.stderr.flush()
    saved_fd = os.dup(2)
    terminal = None
    if _fd(console) == 2:  # the console is file descriptor 2, which goes to the log now: write to a copy of it
        terminal = open(os.dup(saved_fd), "w", encoding=getattr(console, "encoding", None) or "utf-8", buffering=1)
        console = terminal
    with open(path, "a", encoding="utf-8", errors="replace", buffering=1) as log:
        stream = EngineStderr(log, console)
        moved = _stderr_handlers({previous, sys.__stderr__})
        for handler in moved:
            handler.setStream(stream)
        os.dup2(log.fileno(), 2)
        sys.stderr = stream
        try:
            yield
        finally:
            sys.stderr = previous
            log.flush()
            stream.close_log(previous)
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            # handlers made while the engine ran (a library imported then) stay on stderr, not the closed log
            for handler in _stderr_handlers({stream}):
                handler.setStream(previous)
            if terminal is not None:
                terminal.close()


def _fd(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # pytest's capture, io.StringIO: no file descriptor
        return None


def _stderr_handlers(streams: set) -> list[logging.StreamHandler]:
    """Every logging handler that writes to one of `streams` (log files excluded)."""
    loggers = [logging.getLogger(), *(obj for obj in logging.Logger.manager.loggerDict.values())]
    found = []
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if (
                isinstance(handler, logging.StreamHandler)
                and not isinstance(handler, logging.FileHandler)
                and not isinstance(getattr(type(handler), "stream", None), property)  # lastResort: sys.stderr itself
                and handler.stream in streams
                and handler not in found
            ):
                found.append(handler)
    return found
