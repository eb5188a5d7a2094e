"""Finding the real CMS sample files without manual steps, checksum-verified.

The samples are small, real CMS event files published inside public packages.
:func:`locate_sample` looks in, in order:

1. the folder named by the environment variable ``PYSONIC_SAMPLES``;
2. ``data/`` of the project's shared folder (:func:`shared_folder`: ``../shared`` beside
   the checkout, as the developers' machines and CI lay it out; absent on a user's);
3. the data folder of the installed ``scikit-hep-testdata`` package (the ``test`` extra
   pins 0.3.12, the last version whose wheel ships ``uproot-HZZ.root``; later versions
   download their files on first use, which this step never does);
4. the cache folder ``$PYSONIC_CACHE`` (default ``~/.cache/pysonic/samples``);

and else fetches the file into the cache: the coffea files from the source
distribution of ``coffea==2026.9.0`` (``pip download``, about 30 MB: ~1 min the first
time, as pip also fetches build tools to prepare the package's metadata; ~12 s once pip's
cache holds them), the others through ``skhep_testdata.data_path`` when the package is
installed (its current versions download from the scikit-hep-testdata repository). Every
file is checked against its SHA-256 before use; a file with another digest is never used.

Command line: ``python -m framework.io.samples NAME...`` prints the paths (fetching if
needed).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from framework.utilities import FileOpenError

__all__ = ["SHA256", "locate_sample", "search_folders", "shared_folder", "extract_from_sdist"]

log = logging.getLogger("pysonic.samples")

# The checksums of the files as the packages named below publish them.
#: Sample name -> its SHA-256 checksum (hex), verified on every use.
SHA256 = {
    "Run2012BC_DoubleMuParked_Muons_1000evts_rntuple_v1-0-0-0.root": "6a71d6ca866b76c8d89689dfce2cc402aecd2aea0ff03a650db9fe78e60b8385",  # noqa: E501 - a file name and its hash
    "nanoAOD_2015_CMS_Open_Data_ttbar.root": "c14a29b25b15b837226f396e920b5d9fb134f3558bef5b0a9db5d6d9606c5f3a",
    "nano_dimuon.root": "eac7c0a973e054e890766ec4c61ca784d3d49e4f82ec0c8b9dfbe55c233297a9",
    "nano_dy.root": "159b17b34b4d13ea4960d36fb9b01f2a505cc1a5a8de0fb3cfa185154543c81c",
    "nano_dy_rntuple.root": "b0adca6eec90dc3ec73ec139d39a0929a3e08db825ef4df5691e6c03b792a3d6",
    "nano_tt_v12.root": "bc9afdac1e5e1bf820f79e4f8d4942c893ed2accfcb2e49bb63b69727b59af3b",
    "nano_tt_v15.root": "0ee769872082459bf2ccbef08b916c26b3070b64969812aea4d75a0cfa006256",
    "pfnano.root": "504f10f40146005184a1365dcf8b6c8235983597567fab04d1b4b6cc25603939",
    "uproot-HZZ.root": "baa852f7b801eee0fb7234f44864a20808d17d84fa44e712072fa881c423ad46",
}

COFFEA_VERSION = "2026.9.0"
COFFEA_SAMPLES = (
    "pfnano.root",
    "nano_tt_v15.root",
    "nano_tt_v12.root",
    "nano_dy.root",
    "nano_dimuon.root",
    "nano_dy_rntuple.root",  # nano_dy.root's events as an RNTuple
)
_CHUNK = 1 << 20  # bytes per read while hashing/copying

REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_folder() -> Path:
    """``$PYSONIC_CACHE`` or ``~/.cache/pysonic/samples``."""
    return Path(os.environ.get("PYSONIC_CACHE") or Path.home() / ".cache" / "pysonic" / "samples")


def shared_folder() -> Path | None:
    """The project's shared folder: ``$PYSONIC_SHARED``, else ``../shared`` beside the
    checkout; None when ``PYSONIC_SHARED`` is set but empty (``PYSONIC_SHARED= pytest``: the
    suite as on a user's machine, which has no such folder)."""
    value = os.environ.get("PYSONIC_SHARED")
    if value is None:
        return REPO_ROOT.parent / "shared"
    return Path(value) if value else None


def _package_folder(package: str, sub: str) -> Path | None:
    """``<installed package>/<sub>``, found without importing the package (None if absent)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / sub


def search_folders() -> list[Path]:
    """The folders searched before fetching, in order (see the module docstring)."""
    folders = []
    if os.environ.get("PYSONIC_SAMPLES"):
        folders.append(Path(os.environ["PYSONIC_SAMPLES"]))
    shared = shared_folder()
    if shared is not None:
        folders.append(shared / "data")
    skhep = _package_folder("skhep_testdata", "data")
    if skhep is not None:
        folders.append(skhep)
    folders.append(cache_folder())
    return folders


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, name: str) -> Path:
    """Return ``path`` if its SHA-256 is the one of sample ``name``.

    Raises:
        FileOpenError: the digest differs (names the file, expected and actual digests).
    """
    actual = sha256_of(path)
    if actual != SHA256[name]:
        raise FileOpenError(
            f"sample file '{path}' has SHA-256 {actual}, expected {SHA256[name]}: it is not the "
            f"published '{name}' (corrupt or a different version); remove it"
        )
    return path


def locate_sample(name: str, *, fetch: bool = True) -> Path:
    """The path of a verified copy of sample ``name`` (e.g. ``"pfnano.root"``).

    Args:
        name: a file name listed in :data:`SHA256`.
        fetch: whether to download when no folder has it (see the module docstring).

    Raises:
        FileOpenError: unknown name; a copy with the wrong SHA-256 in ``PYSONIC_SAMPLES``,
            the shared folder or the installed package; the sample is nowhere and cannot be
            fetched.
    """
    if name not in SHA256:
        raise FileOpenError(f"unknown sample '{name}' (known: {', '.join(sorted(SHA256))})")
    cache = cache_folder()
    for folder in search_folders():
        candidate = folder / name
        if not candidate.is_file():
            continue
        if folder == cache and sha256_of(candidate) != SHA256[name]:
            log.warning("cached sample %s has the wrong SHA-256: removed, fetching again", candidate)
            candidate.unlink()
            continue
        return verify(candidate, name)
    if not fetch:
        raise FileOpenError(f"sample '{name}' is in none of {', '.join(map(str, search_folders()))}")
    return _fetch(name, cache)


def _fetch(name: str, cache: Path) -> Path:
    if name in COFFEA_SAMPLES:
        with tempfile.TemporaryDirectory(prefix="pysonic-coffea-") as tmp:
            sdist = _pip_download_coffea(Path(tmp))
            # One download serves every coffea sample: extract them all.
            extract_from_sdist(sdist, {s: f"coffea-{COFFEA_VERSION}/tests/samples/{s}" for s in COFFEA_SAMPLES}, cache)
        return cache / name
    try:
        import skhep_testdata  # optional (the test extra installs it)
    except ImportError:
        raise FileOpenError(
            f"sample '{name}' is not on this machine; it comes with the package scikit-hep-testdata "
            f"(pip install scikit-hep-testdata), or set PYSONIC_SAMPLES to a folder holding it"
        ) from None
    log.info("fetching sample %s with skhep_testdata", name)
    return verify(Path(skhep_testdata.data_path(name)), name)


def _pip_download_coffea(folder: Path) -> Path:
    log.info("downloading the coffea==%s source distribution (about 30 MB) for its test samples", COFFEA_VERSION)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"coffea=={COFFEA_VERSION}",
        "-d",
        str(folder),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    sdist = folder / f"coffea-{COFFEA_VERSION}.tar.gz"
    if done.returncode != 0 or not sdist.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise FileOpenError(f"cannot download coffea=={COFFEA_VERSION} to get its samples: {last}")
    return sdist


def extract_from_sdist(sdist: Path, members: dict[str, str], cache: Path) -> dict[str, Path]:
    """Copy ``members`` (sample name -> path in the tarball) into ``cache``, verified.

    Each file is written to a temporary name in ``cache``, hashed while copying, and
    renamed into place only if the SHA-256 matches (so a reader never sees a partial or
    wrong file).

    Raises:
        FileOpenError: the tarball cannot be read, lacks a member, or a member's digest
            differs from :data:`SHA256`.
    """
    cache.mkdir(parents=True, exist_ok=True)
    result = {}
    try:
        with tarfile.open(sdist) as tar:
            for name, member in members.items():
                try:
                    source = tar.extractfile(member)
                except KeyError:
                    source = None
                if source is None:
                    raise FileOpenError(f"'{sdist}' has no file '{member}'")
                result[name] = _copy_verified(source, cache / name, name, f"{sdist}:{member}")
    except (tarfile.TarError, OSError) as exc:
        raise FileOpenError(f"cannot read '{sdist}': {type(exc).__name__}: {exc}") from exc
    return result


def _copy_verified(source: IO[bytes], target: Path, name: str, origin: str) -> Path:
    digest = hashlib.sha256()
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            while block := source.read(_CHUNK):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != SHA256[name]:
            raise FileOpenError(
                f"sample file '{origin}' has SHA-256 {digest.hexdigest()}, expected {SHA256[name]}; not used"
            )
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    log.info("cached sample %s", target)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m framework.io.samples NAME...``: print the path of each sample."""
    names = sys.argv[1:] if argv is None else argv
    if not names or names[0] in ("-h", "--help"):
        print("usage: python -m framework.io.samples NAME...\nsamples: " + ", ".join(sorted(SHA256)))
        return 0 if names else 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    status = 0
    for name in names:
        try:
            print(locate_sample(name))
        except FileOpenError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
