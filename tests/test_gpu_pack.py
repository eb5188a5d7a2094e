"""The GPU pack's wheel list covers what the runtime imports (no download, no GPU).

``scripts/gpu/wheels.py`` computes the wheels ``pack.sh`` carries to the GPU machine: the
closure of the installed pysonic's requirements minus the machine's image
(``scripts/gpu/image.txt``). On 2026-11-27 the hand-made list then in ``pack.sh`` lacked
``stamina`` (imported by ``framework/io/_remote.py``) and every GPU experiment failed at its
first job with ``ModuleNotFoundError``; these tests would have caught it.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
try:
    import wheels
finally:
    sys.path.remove(str(ROOT / "scripts" / "gpu"))

# pack.sh's hand-made list at commit c627617 (before wheels.py).
HAND_LIST = ["trio", "outcome", "sniffio", "awkward", "awkward-cpp", "uproot", "cramjam", "hist"]
HAND_LIST += ["boost-histogram", "histoprint", "uhi", "tritonclient", "python-rapidjson"]


@pytest.fixture(scope="module")
def env():
    return wheels.target_environment()


@pytest.fixture(scope="module")
def image(env):
    return wheels.covered_by_image(env)


@pytest.fixture(scope="module")
def runtime():
    dists, unknown = wheels.runtime_distributions()
    # A module imported by the runtime that no installed distribution provides: the check
    # could not judge it (install the test extra, or it is a new undeclared dependency).
    assert unknown == {}, f"imported but not installed here: {unknown}"
    return dists


def test_runtime_imports_are_covered_by_pack_or_image(runtime, image):
    assert {"stamina", "trio", "tritonclient", "uproot", "awkward", "torch"} <= set(runtime)  # the walk sees them
    packed = wheels.pack_wheels()
    assert all(version is not None for version in packed.values()), packed  # each one installed here, pinned
    assert wheels.uncovered(runtime, packed, image) == {}
    assert not set(packed) & image and "nvidia-pytriton" not in packed and "pysonic" not in packed


def test_the_check_fails_on_the_old_hand_list(runtime, image):
    """The same check on the list that broke the GPU run names what it lacked."""
    missing = wheels.uncovered(runtime, HAND_LIST, image)
    assert "stamina" in missing and missing["stamina"].startswith("stamina in framework/io/_remote.py")


def test_pack_is_closed_under_requirements(env, image):
    """stamina's own requirement (tenacity) is packed too: every requirement of a packed wheel
    is packed or in the image (tenacity was the second wheel added by hand on 2026-11-27)."""
    packed = wheels.pack_wheels(env)
    assert {"stamina", "tenacity"} <= set(packed)
    closure, _ = wheels.closure(packed, env, stop=wheels.REPLACED)
    assert set(closure) <= set(packed) | image


def test_markers_and_extras_follow_the_target(env):
    """Requirements are taken for CPython 3.12 on Linux, extras only where named."""
    needed, reached = wheels.closure(["pysonic"], env, stop=wheels.REPLACED)
    assert reached == {"nvidia-pytriton"}
    assert "grpcio" in needed  # tritonclient[grpc]: an extra named by pysonic's requirement
    assert "pytest" not in needed and "mypy" not in needed  # pysonic's own extras are not followed
    old = wheels.target_environment("3.10.12")
    assert "exceptiongroup" in wheels.closure(["trio"], old)[0]  # trio needs it before 3.11 only
    assert "exceptiongroup" not in wheels.closure(["trio"], env)[0]


def test_command_line_prints_pinned_list():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu" / "wheels.py")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split()
    assert any(line.startswith("stamina==") for line in lines) and all("==" in line for line in lines)
