"""The end-of-job summary's table of remote inputs: where each file was opened.

CMSSW's ``XrdAdaptor`` logs which data server each file was read from; here the summary
shows, per file opened from a URL or through the redirectors, the place that served it
(the redirector for a ``/store/...`` name), the data server behind it (XRootD), the open
time, the places that failed first (with their reason) and the reads tried again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from ._remote import OpenedFile, is_remote

__all__ = ["input_table"]


def input_table(opened: Sequence[OpenedFile], retries: Mapping[str, int]) -> list[Any]:
    """A rich table with one row per remote file opened (in order); ``[]`` if there were none."""
    rows = [o for o in opened if is_remote(o.name)]
    if not rows:
        return []
    # Text, not str: names and reasons hold brackets ("[3011]"), which rich would take for markup.
    table = Table(title=Text("PoolSource ---------- Remote input files ------------"), title_justify="left")
    for col in ("File", "Served by", "Data server", "Open [s]", "Failed first", "Read retries"):
        table.add_column(Text(col), justify="right" if col in ("Open [s]", "Read retries") else "left")
    for o in rows:
        table.add_row(
            Text(o.name),
            Text(o.served_by),
            Text(o.data_server or "-"),
            f"{o.open_seconds:.2f}",
            Text("; ".join(o.failed) or "-"),
            str(retries.get(o.name, 0)),
        )
    return [table]
