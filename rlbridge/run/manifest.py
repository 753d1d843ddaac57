"""The run manifest (manifest.json in every run directory): what a later `rlbridge reproduce` needs
to rebuild the run and to say why a rerun differs.

Written by the runner before the engine starts: the rlbridge source (version, commit, dirty flag and
a hash of the uncommitted diff), the exact package set of the environment the engine runs in (read
from its metadata files without starting it, rlbridge.envs.provenance.package_set), the patches this
run may apply with the fingerprints of their targets in that environment, the model directories'
hashes, the seeds, Python, OS and hardware. Two things are only known once the engine has run: the
hash of the data rows (computed by rlbridge.contract.data.load_rows as it loads them, in whichever
process that is, and handed over through DATA_DIGEST_ENV) and what each patch really did
(patches.json); `complete` adds both at the end of the run.

Everything here is cheap (tens of milliseconds): no engine, no torch, no `pip freeze`, no nvidia-smi.
Model files are hashed once and cached by (path, size, mtime).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rlbridge.contract.data import DATA_DIGEST_ENV, rows_digest

__all__ = ["DATA_DIGEST_ENV", "rows_digest", "build", "write", "read", "complete", "differences"]

MANIFEST_FILE = "manifest.json"
FORMAT = 1
# the paths that make what a run executes; tests, docs and run outputs do not
SOURCE_PATHS = ("rlbridge", "adapters", "plugins", "pyproject.toml")
# process variables that change numerics or seeding
RECORDED_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "CUBLAS_WORKSPACE_CONFIG",
    "PYTHONHASHSEED",
    "TORCH_DETERMINISTIC",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_BATCH_INVARIANT",
)
# config keys that say where a run writes or which environment it runs in (compared by its packages),
# not what it computes
PER_RUN_KEYS = ("run_name", "output_dir", "checkpoint.dir", "checkpoint.resume", "engine_env")


def build(config, backend, plan, engine_python: Path | None, models: list[tuple[str, str]]) -> dict[str, Any]:
    """The manifest of a run about to start (see the module docstring); `models` are the run's
    (config field, path) pairs (rlbridge.run.runner.model_paths)."""
    from rlbridge import __version__
    from rlbridge.envs.provenance import package_set, site_dirs

    dirs = site_dirs(engine_python)
    packages = package_set(dirs)
    started = time.time()
    return {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "rlbridge": {"version": __version__, **source_state()},
        "job": {
            "backend": backend.name,
            "engine": backend.distribution,
            "engine_version": packages.get(_norm(backend.distribution)),
            "config_sha256": config_digest(config.model_dump(mode="json")),
        },
        "engine_env": {
            "python": str(engine_python) if engine_python else sys.executable,
            "python_version": _env_python_version(engine_python),
            "site_packages": dirs,
            "packages": packages,
            "packages_sha256": packages_digest(packages),
        },
        "patches": patch_entries(backend, plan, packages, dirs),
        "data": {
            field: {"source": source.model_dump(mode="json", exclude_none=True), "rows": None, "rows_sha256": None}
            for field, source in (("data.train", config.data.train), ("data.eval", config.data.eval))
            if source is not None
        },
        "models": {field: model_digest(path) for field, path in models},
        "seeds": seeds(config.model_dump(mode="json")),
        "deterministic": bool(getattr(config.training, "deterministic", False)),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "os": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "libc": _libc(),
            "host": socket.gethostname(),
        },
        "hardware": hardware(packages),
        "env": {name: os.environ[name] for name in RECORDED_ENV if name in os.environ},
    }


def write(run_dir: Path, manifest: dict[str, Any]) -> None:
    tmp = Path(run_dir) / f".{MANIFEST_FILE}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(Path(run_dir) / MANIFEST_FILE)


def read(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / MANIFEST_FILE).read_text())


def digest_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "manifest.d"


def complete(run_dir: Path, models: list[tuple[str, str]]) -> dict[str, Any] | None:
    """At the end of a run: the data-row hashes the loading processes wrote, what each patch did
    (patches.json), and the hashes of model directories that did not exist at the start (a builtin
    model built on first use)."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        return None
    manifest = read(run_dir)
    parts = digest_dir(run_dir)
    for part in sorted(parts.glob("*.json")) if parts.is_dir() else []:
        try:
            loaded = json.loads(part.read_text())
        except (OSError, ValueError):
            continue
        entry = manifest["data"].setdefault(loaded["field"], {})
        entry.update(rows=loaded["rows"], rows_sha256=loaded["rows_sha256"])
    patches_file = Path(run_dir) / "patches.json"
    if patches_file.exists():
        try:
            by_patch = json.loads(patches_file.read_text()).get("by_patch", {})
        except (OSError, ValueError):
            by_patch = {}
        for entry in manifest["patches"]:
            done = by_patch.get(entry["patch"])
            if done is not None:
                entry["applied_in_processes"] = len(done.get("applied_in", []))
    for field, path_ in models:
        if manifest["models"].get(field, {}).get("sha256") is None:
            manifest["models"][field] = model_digest(path_)
    write(run_dir, manifest)
    import shutil

    shutil.rmtree(parts, ignore_errors=True)
    return manifest


# --- pieces ---------------------------------------------------------------------------------------


def source_state() -> dict[str, Any]:
    """The git commit of the checkout rlbridge runs from, whether SOURCE_PATHS differ from it, and a
    hash of that difference (tracked changes and untracked files), so that two dirty runs can be told
    apart. An installed (non-git) rlbridge has commit None."""
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        return {"commit": None, "dirty": None, "diff_sha256": None}

    def git(*args: str) -> bytes | None:
        try:
            res = subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "diff_sha256": None}
    diff = git("diff", "HEAD", "--binary", "--", *SOURCE_PATHS) or b""
    untracked = (git("ls-files", "--others", "--exclude-standard", "-z", "--", *SOURCE_PATHS) or b"").split(b"\0")
    h = hashlib.sha256(diff)
    for name in sorted(n for n in untracked if n):
        h.update(b"\0" + name + b"\0")
        try:
            h.update((repo / name.decode()).read_bytes())
        except OSError:
            pass
    dirty = bool(diff) or any(untracked)
    return {"commit": commit.decode().strip(), "dirty": dirty, "diff_sha256": h.hexdigest() if dirty else None}


def packages_digest(packages: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{n}=={v}\n" for n, v in sorted(packages.items())).encode()).hexdigest()


def config_digest(config: dict[str, Any]) -> str:
    """Hash of the resolved config without the keys that only say where the run writes."""
    data = json.loads(json.dumps(config))
    for key in PER_RUN_KEYS:
        node = data
        *parents, last = key.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def patch_entries(backend, plan, packages: dict[str, str], dirs: list[str]) -> list[dict[str, Any]]:
    """The patches this run may apply (the plan needs them and the engine environment's version is in
    their range), each with its targets' fingerprints in that environment and those it was written for."""
    from packaging.specifiers import SpecifierSet

    from rlbridge.engine.patch_report import fingerprint

    out = []
    try:
        patches = backend.patches()
    except Exception as exc:  # an adapter whose patches cannot load here is named, not fatal
        return [{"error": f"{type(exc).__name__}: {exc}"}]
    for patch in patches:
        version = packages.get(_norm(patch.engine))
        if version is None or not patch.applies_to(version) or not patch.when(plan.native):
            continue
        targets = []
        for target in patch.targets:
            if target.versions and not SpecifierSet(target.versions).contains(version, prereleases=True):
                continue
            targets.append(
                {
                    "target": f"{target.module}:{target.qualname}",
                    "fingerprint": fingerprint(target.module, target.qualname, dirs),
                    "expected": list(target.fingerprints),
                }
            )
        out.append(
            {
                "patch": patch.name,
                "engine": patch.engine,
                "engine_version": version,
                "versions": patch.versions,
                "kind": patch.kind.value,
                "targets": targets,
            }
        )
    return out


def model_digest(path: str) -> dict[str, Any]:
    """sha256 over (relative path, file sha256) of every file of a model directory; None while the
    directory does not exist (a builtin model not built yet) or the path is a hub id."""
    from rlbridge.contract.models import BUILTIN_PREFIX, looks_local, resolve_path

    local = Path(resolve_path(path)).expanduser()
    if not local.is_dir():
        why = (
            "not built yet"
            if path.startswith(BUILTIN_PREFIX)
            else "not a directory"
            if looks_local(path)
            else "a hub id: not hashed (pin a local copy to reproduce it)"
        )
        return {"path": path, "sha256": None, "files": 0, "note": why}
    cache = _HashCache()
    h = hashlib.sha256()
    files = sorted(p for p in local.rglob("*") if p.is_file())
    size = 0
    for file in files:
        h.update(str(file.relative_to(local)).encode() + b"\0" + cache.sha256(file).encode() + b"\n")
        size += file.stat().st_size
    cache.save()
    return {"path": path, "resolved": str(local), "sha256": h.hexdigest(), "files": len(files), "bytes": size}


class _HashCache:
    """File content hashes keyed by (path, size, mtime_ns): a multi-GB model is read once, not per run."""

    def __init__(self) -> None:
        from rlbridge.machine import cache_dir

        self.path = cache_dir() / "file-hashes.json"
        try:
            self.entries: dict[str, list] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.entries = {}
        self.changed = False

    def sha256(self, file: Path) -> str:
        st = file.stat()
        key = str(file.resolve())
        hit = self.entries.get(key)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        h = hashlib.sha256()
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        self.entries[key] = [st.st_size, st.st_mtime_ns, h.hexdigest()]
        self.changed = True
        return h.hexdigest()

    def save(self) -> None:
        if not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(self.entries))
            tmp.replace(self.path)
        except OSError:
            pass


def seeds(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every config value whose key is or ends in 'seed' (training.seed, plugin args...)."""
    found: dict[str, Any] = {}
    if isinstance(config, dict):
        for key, value in config.items():
            path = f"{prefix}{key}"
            if isinstance(value, (dict, list)):
                found.update(seeds(value, path + "."))
            elif str(key).endswith("seed"):
                found[path] = value
    elif isinstance(config, list):
        for i, value in enumerate(config):
            found.update(seeds(value, f"{prefix.rstrip('.')}[{i}]."))
    return found


def hardware(packages: dict[str, str]) -> dict[str, Any]:
    """CPU model and counts, memory, NVIDIA GPUs and driver (from /proc, no nvidia-smi), and the CUDA
    build of the engine environment (torch's local version, the CUDA runtime wheel)."""
    info: dict[str, Any] = {"cpu_model": None, "cpus": os.cpu_count()}
    try:
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu_model"] = next(
                (line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None
            )
    except OSError:
        info["cpu_model"] = platform.processor() or None
    try:
        with open("/proc/meminfo") as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
        info["memory_gib"] = round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    gpus = []
    for gpu in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            fields = dict(line.split(":", 1) for line in gpu.read_text().splitlines() if ":" in line)
            gpus.append(fields.get("Model", "").strip())
        except OSError:
            continue
    info["gpus"] = gpus
    try:
        info["nvidia_driver"] = Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        info["nvidia_driver"] = None
    torch_version = packages.get("torch", "")
    info["torch_build"] = torch_version.partition("+")[2] or None  # PyPI's default wheels carry no local tag
    info["cuda_runtime"] = next((v for n, v in packages.items() if n.startswith("nvidia-cuda-runtime")), None)
    return info


def _env_python_version(engine_python: Path | None) -> str:
    if engine_python is None:
        return platform.python_version()
    cfg = Path(engine_python).parent.parent / "pyvenv.cfg"
    try:
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version", "version_info"):
                return value.strip()
    except OSError:
        pass
    return "unknown"


def _libc() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None


def _norm(name: str) -> str:
    from rlbridge.envs.provenance import _normalized

    return _normalized(name)


# --- comparing two manifests ------------------------------------------------------------------------


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two runs' manifests that can change what they compute, one line each.
    The host, creation time and paths are not compared."""
    out: list[str] = []

    def same(label: str, a: Any, b: Any) -> None:
        if a != b:
            out.append(f"{label}: {_short(a)} -> {_short(b)}")

    ro, rn = old.get("rlbridge", {}), new.get("rlbridge", {})
    same("rlbridge.version", ro.get("version"), rn.get("version"))
    same("rlbridge.commit", ro.get("commit"), rn.get("commit"))
    same("rlbridge uncommitted diff", ro.get("diff_sha256"), rn.get("diff_sha256"))
    same(
        "job.config_sha256 (the resolved config)",
        old.get("job", {}).get("config_sha256"),
        new.get("job", {}).get("config_sha256"),
    )
    eo, en = old.get("engine_env", {}), new.get("engine_env", {})
    same("engine_env.python_version", eo.get("python_version"), en.get("python_version"))
    out += package_differences(eo.get("packages", {}), en.get("packages", {}))
    po = {p.get("patch"): p for p in old.get("patches", [])}
    pn = {p.get("patch"): p for p in new.get("patches", [])}
    for name in sorted(set(po) | set(pn)):
        if name not in pn or name not in po:
            out.append(f"patch {name}: {'only in the original run' if name in po else 'only in the rerun'}")
            continue
        fo = {t["target"]: t["fingerprint"] for t in po[name].get("targets", [])}
        fn = {t["target"]: t["fingerprint"] for t in pn[name].get("targets", [])}
        for target in sorted(set(fo) | set(fn)):
            same(f"patch {name} target {target} fingerprint", fo.get(target), fn.get(target))
    for field in sorted(set(old.get("data", {})) | set(new.get("data", {}))):
        do, dn = old.get("data", {}).get(field, {}), new.get("data", {}).get(field, {})
        same(f"{field} rows", do.get("rows"), dn.get("rows"))
        same(f"{field} rows_sha256", do.get("rows_sha256"), dn.get("rows_sha256"))
    for field in sorted(set(old.get("models", {})) | set(new.get("models", {}))):
        same(
            f"{field} model sha256",
            old.get("models", {}).get(field, {}).get("sha256"),
            new.get("models", {}).get(field, {}).get("sha256"),
        )
    same("seeds", old.get("seeds"), new.get("seeds"))
    same("training.deterministic", old.get("deterministic"), new.get("deterministic"))
    ho, hn = old.get("hardware", {}), new.get("hardware", {})
    for key in ("cpu_model", "cpus_usable", "gpus", "nvidia_driver", "torch_build", "cuda_runtime"):
        same(f"hardware.{key}", ho.get(key), hn.get(key))
    for key in ("system", "release", "machine", "libc"):
        same(f"os.{key}", old.get("os", {}).get(key), new.get("os", {}).get(key))
    same("env", old.get("env"), new.get("env"))
    return out


def package_differences(old: dict[str, str], new: dict[str, str]) -> list[str]:
    out = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            out.append(f"package {name}: {old.get(name) or 'absent'} -> {new.get(name) or 'absent'}")
    return out


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."
