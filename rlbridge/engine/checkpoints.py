"""Which of an engine's checkpoints are complete, so that a resumed run never loads a half-written one.

A run killed while the engine saves leaves a directory that looks like a checkpoint. verl and
DeepSpeed (OpenRLHF) write a pointer last (verl's `latest_checkpointed_iteration.txt`, DeepSpeed's
`latest`), but with a plain open-and-write: a kill at that moment leaves an empty pointer, which verl
cannot parse and DeepSpeed turns into a path that does not exist. And a pointer says nothing of a
directory that was deleted or truncated afterwards. So before a resume the adapters verify:
a checkpoint is complete when it is not newer than the engine's pointer (when the pointer can be
read) and every tensor file in it is a whole `torch.save` archive (the zip's central directory is
written last, so a truncated file fails to open; opening reads only that directory, not the tensors).

Standard library only: this runs in every engine environment.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

TENSOR_SUFFIXES = (".pt", ".pth", ".bin")


def torch_file_complete(path: Path) -> bool:
    """A `torch.save` file (zip format, torch >= 1.6) that was written to the end."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def tensors_complete(directory: Path, required: Iterable[str] = ()) -> bool:
    """Every tensor file under `directory` is whole, there is at least one, and each of `required`
    (glob patterns relative to `directory`) matches a file."""
    if not directory.is_dir():
        return False
    files = [p for p in directory.rglob("*") if p.is_file() and p.suffix in TENSOR_SUFFIXES]
    if not files or not all(torch_file_complete(p) for p in files):
        return False
    return all(any(directory.glob(pattern)) for pattern in required)


def read_step(pointer: Path) -> int | None:
    """The step an engine's 'latest' pointer file names (e.g. '12' or 'global_step12'); None when the
    file is missing or torn."""
    try:
        text = pointer.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    match = re.fullmatch(r"\D*(\d+)", text)
    return int(match.group(1)) if match else None


def step_dirs(directory: Path, prefix: str) -> dict[int, Path]:
    """step -> directory for `<prefix><step>` directories (e.g. 'global_step_' or 'global_step')."""
    out = {}
    if directory.is_dir():
        for path in directory.iterdir():
            rest = path.name[len(prefix) :] if path.name.startswith(prefix) else ""
            if rest.isdigit() and path.is_dir():
                out[int(rest)] = path
    return out


def write_pointer(pointer: Path, text: str) -> None:
    """Replace an engine's pointer file atomically (a kill leaves the old one or the new one)."""
    tmp = pointer.with_name(f".{pointer.name}.rlbridge-tmp")
    tmp.write_text(text)
    os.replace(tmp, pointer)
