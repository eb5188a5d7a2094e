"""The README routes: it stays short, its commands are the ones CI runs, its links lead somewhere.

The documentation build itself (every cross-reference of the pages and docstrings resolved)
is a step of ``.ci/run``, not a test: it needs the ``docs`` extra and ~20 s.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI_RUN = (ROOT / ".ci" / "run").read_text()


def commands(text: str) -> list[str]:
    """The lines of the README's ``bash`` blocks."""
    return [line for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()]


def test_readme_routes_in_at_most_250_lines():
    # The README routes; the rest lives in docs/: a README that grows past this is a page to move.
    assert len(README.splitlines()) <= 250


def test_main_job_installs_only_the_package_and_tests_install_the_test_extra():
    main, test = commands(README)[:2]
    assert "pip install -e . " in main and "[test]" not in main and "cmsrun configs/sonic_pfnano_cfg.py" in main
    assert "pip install -e '.[test]'" in test and test.endswith("python -m pytest")


def test_ci_runs_the_readme_test_command_and_docs_build():
    test = commands(README)[1]
    # .ci/run installs what the README's test command installs (plus the docs extra) and runs
    # the same pytest; and it builds the docs with the command the README gives.
    extras = re.search(r"pip install --quiet -e '\.\[([a-z,]+)\]'", CI_RUN)
    assert extras and "test" in extras.group(1).split(",") and "docs" in extras.group(1).split(",")
    assert re.search(r"^PYTHONFAULTHANDLER=1 .*\.venv/bin/python -m pytest$", CI_RUN, re.M)
    assert test.endswith(".venv/bin/python -m pytest")
    build = re.search(r"python -m sphinx (.*) docs docs/_build/html", CI_RUN)
    assert build and f"python -m sphinx {build.group(1)} docs docs/_build/html" in README
    assert "-n -W" in build.group(1)  # nitpicky, and a warning fails the build


def test_readme_links_to_files_that_exist():
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    assert links, "the README routes through links"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
