"""The benchmark artefacts stay in their place and small: ``docs/performance/`` holds the
figures the pages show, ``bench-results/`` the runs behind them, within its size budget.

Files only, read from the checkout: no server, no run (milliseconds).
"""

from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
RESULTS = REPO / "bench-results"

# bench-results/: 3.4 MiB on 2026-11-28, nearly all of it two py-spy profiles' raw stacks
# (0.6-1.0 MB a file). 5 MiB leaves room for many more JSON runs (5-90 kB each) but not for a
# second pair of profiles beside the first: that is a choice to make (replace, or trim),
# not a file to add. Every clone carries the folder.
RESULTS_BUDGET = 5 * 2**20
FILE_BUDGET = 3 * 2**19  # 1.5 MiB: the largest today is 1.0 MB (profile-before/sonic.txt)
RESULT_KINDS = {".json", ".txt", ".patch"}  # runs, raw stacks, patches; and the folder's README.md
FIGURE_KINDS = {".png", ".svg"}


def _files(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_bench_results_fit_their_budget():
    files = _files(RESULTS)
    assert files, f"{RESULTS} is empty or missing"
    sizes = {str(p.relative_to(REPO)): p.stat().st_size for p in files}
    too_large = {name: size for name, size in sizes.items() if size > FILE_BUDGET}
    assert not too_large, f"files above {FILE_BUDGET} bytes: {too_large}"
    total = sum(sizes.values())
    assert total <= RESULTS_BUDGET, f"bench-results/ holds {total} bytes, the budget is {RESULTS_BUDGET}"


def test_bench_results_hold_runs_and_docs_hold_figures():
    stray = [str(p.relative_to(REPO)) for p in _files(RESULTS) if p.suffix not in RESULT_KINDS]
    assert stray == ["bench-results/README.md"], f"not a run, raw stacks or a patch: {stray}"
    stray = [str(p.relative_to(REPO)) for p in _files(DOCS / "performance") if p.suffix not in FIGURE_KINDS]
    assert not stray, f"not a figure (runs go to bench-results/): {stray}"


def test_every_figure_in_the_docs_is_shown_by_a_page():
    pages = "\n".join(p.read_text() for p in DOCS.glob("*.md"))
    shown = set(re.findall(r"\]\((performance/[^)\s]+)\)", pages))
    figures = {str(p.relative_to(DOCS)) for p in _files(DOCS / "performance")}
    assert figures - shown == set(), "figures no page shows or links"
    assert shown - figures == set(), "figures the pages name that are missing"
