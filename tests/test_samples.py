"""framework.io.samples: search order, checksum verification, extraction from an sdist.

Offline only. The real fetch (``pip download coffea==2026.9.0``, about 30 MB: 65 s with a
cold pip cache, 12 s with a warm one, on the development machine) was run by hand; it is
too slow and too network-dependent for the suite::

    PYSONIC_CACHE=/tmp/c python -c "import framework.io.samples as s; s._fetch('nano_dy.root', s.cache_folder())"

Here the download is faked and the extraction runs on a small sdist built in ``tmp_path``.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import framework.io.samples as samples
from framework import FileOpenError

SHARED = (samples.shared_folder() or Path("/nonexistent")) / "data"
needs_shared = pytest.mark.skipif(
    not (SHARED / "SHA256SUMS").is_file(), reason="needs the project's shared data folder (../shared/data)"
)
LOCAL = samples.search_folders()  # before the fixture below replaces the cache folder


def local(name: str) -> Path:
    """A verified copy of ``name`` already on this machine (any folder, the usual cache
    included; never fetched), or the test is skipped."""
    for folder in LOCAL:
        if (folder / name).is_file():
            return samples.verify(folder / name, name)
    pytest.skip(f"no local {name}: 'python -m framework.io.samples {name}' fetches it")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No PYSONIC_SAMPLES, and a cache folder of our own."""
    monkeypatch.delenv("PYSONIC_SAMPLES", raising=False)
    monkeypatch.setenv("PYSONIC_CACHE", str(tmp_path / "cache"))


@needs_shared
def test_locate_pfnano_in_the_shared_folder():
    path = samples.locate_sample("pfnano.root", fetch=False)
    assert path == SHARED / "pfnano.root"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == samples.SHA256["pfnano.root"]


@needs_shared
def test_checksums_match_the_shared_list():
    listed = dict(reversed(line.split()) for line in (SHARED / "SHA256SUMS").read_text().splitlines() if line)
    assert listed.items() <= samples.SHA256.items()


def test_corrupt_copy_in_pysonic_samples_is_rejected(tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    data = bytearray(local("nano_dy.root").read_bytes())
    data[1000] ^= 0xFF
    (folder / "nano_dy.root").write_bytes(bytes(data))
    monkeypatch.setenv("PYSONIC_SAMPLES", str(folder))
    with pytest.raises(
        FileOpenError,
        match=rf"mine/nano_dy.root' has SHA-256 [0-9a-f]{{64}}, expected {samples.SHA256['nano_dy.root']}",
    ):
        samples.locate_sample("nano_dy.root")


def test_pysonic_samples_comes_first(tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "nano_dy.root").write_bytes(local("nano_dy.root").read_bytes())
    monkeypatch.setenv("PYSONIC_SAMPLES", str(folder))
    assert samples.locate_sample("nano_dy.root") == folder / "nano_dy.root"


def test_unknown_sample():
    with pytest.raises(FileOpenError, match=r"unknown sample 'pfnano\.rot'.*pfnano\.root"):
        samples.locate_sample("pfnano.rot")


def fake_sdist(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


def test_extract_from_sdist_verifies_and_writes_atomically(tmp_path, monkeypatch):
    good, bad = b"real sample bytes", b"tampered bytes"
    monkeypatch.setitem(samples.SHA256, "good.root", hashlib.sha256(good).hexdigest())
    monkeypatch.setitem(samples.SHA256, "bad.root", hashlib.sha256(good).hexdigest())
    sdist = fake_sdist(
        tmp_path / "coffea-0.tar.gz", {"pkg/tests/samples/good.root": good, "pkg/tests/samples/bad.root": bad}
    )
    cache = tmp_path / "cache"
    out = samples.extract_from_sdist(sdist, {"good.root": "pkg/tests/samples/good.root"}, cache)
    assert out == {"good.root": cache / "good.root"} and (cache / "good.root").read_bytes() == good
    with pytest.raises(FileOpenError, match=r"bad.root' has SHA-256 .* expected .*; not used"):
        samples.extract_from_sdist(sdist, {"bad.root": "pkg/tests/samples/bad.root"}, cache)
    with pytest.raises(FileOpenError, match="has no file 'pkg/missing.root'"):
        samples.extract_from_sdist(sdist, {"good.root": "pkg/missing.root"}, cache)
    assert sorted(p.name for p in cache.iterdir()) == ["good.root"]  # no temporary leftovers


def test_fetch_path_uses_the_downloaded_sdist(tmp_path, monkeypatch):
    """locate -> not found anywhere -> 'pip download' (faked) -> extracted into the cache."""
    content = b"pretend pfnano"
    monkeypatch.setitem(samples.SHA256, "pfnano.root", hashlib.sha256(content).hexdigest())
    monkeypatch.setenv("PYSONIC_SHARED", "")  # as on a user's machine: no shared folder
    monkeypatch.setattr(samples, "COFFEA_SAMPLES", ("pfnano.root",))
    prefix = f"coffea-{samples.COFFEA_VERSION}/tests/samples/"
    calls = []

    def fake_download(folder):
        calls.append(folder)
        return fake_sdist(folder / "coffea.tar.gz", {prefix + "pfnano.root": content})

    monkeypatch.setattr(samples, "_pip_download_coffea", fake_download)
    path = samples.locate_sample("pfnano.root")
    assert path == tmp_path / "cache" / "pfnano.root" and path.read_bytes() == content
    assert samples.locate_sample("pfnano.root") == path and len(calls) == 1  # cached now
    path.write_bytes(b"corrupted later")
    assert samples.locate_sample("pfnano.root").read_bytes() == content and len(calls) == 2  # healed


def test_the_shared_folder_is_optional(tmp_path, monkeypatch):
    """``../shared`` beside the checkout by default; ``PYSONIC_SHARED`` moves it, and set
    empty it is none (the suite as on a user's machine)."""
    monkeypatch.delenv("PYSONIC_SHARED", raising=False)
    assert samples.shared_folder() == samples.REPO_ROOT.parent / "shared"
    monkeypatch.setenv("PYSONIC_SHARED", str(tmp_path))
    assert tmp_path / "data" in samples.search_folders()
    monkeypatch.setenv("PYSONIC_SHARED", "")
    assert samples.shared_folder() is None
    assert not [f for f in samples.search_folders() if f.name == "data" and f.parent.name == "shared"]


def test_uproot_hzz_comes_with_the_test_extra(monkeypatch):
    """scikit-hep-testdata 0.3.12 (the ``test`` extra) ships uproot-HZZ.root in its wheel:
    found there, verified, with no shared folder, no cache and no download."""
    folder = samples._package_folder("skhep_testdata", "data")
    if folder is None or not (folder / "uproot-HZZ.root").is_file():
        pytest.skip("scikit-hep-testdata 0.3.12 is not installed (pip install -e '.[test]')")
    monkeypatch.setenv("PYSONIC_SHARED", "")
    assert samples.locate_sample("uproot-HZZ.root", fetch=False) == folder / "uproot-HZZ.root"


def test_cli_prints_paths(monkeypatch):
    path = local("pfnano.root")
    monkeypatch.setenv("PYSONIC_SAMPLES", str(path.parent))
    done = subprocess.run(
        [sys.executable, "-m", "framework.io.samples", "pfnano.root"],
        capture_output=True,
        text=True,
        cwd=samples.REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(samples.REPO_ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(path)
