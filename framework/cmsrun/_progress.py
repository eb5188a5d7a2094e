"""The progress bar of ``cmsrun`` (one job, or the work units of a Dask run): rich's.

Columns: description, bar, ``done/total``, a free text field ``rate`` (the last event id,
or the event rate), elapsed time. Disabled (no output at all) when ``enabled`` is false:
not a terminal, or ``--no-progress``.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["progress_bar"]


def progress_bar(console: Console, enabled: bool) -> Progress:
    """A rich ``Progress`` on ``console``; add tasks with ``add_task(name, total=, rate="")``."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    )
