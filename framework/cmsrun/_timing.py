"""FastTimerService: per-event timing on request, as a JSON summary and a timeline trace.

Per-module, per-call times are always recorded by the workers (see ``_worker``); this
service (CMSSW's ``FastTimerService``, with its parameter names) writes them out:

* ``writeJSONSummary`` / ``jsonFileName``: the end-of-job summary (the same data as
  ``cmsrun --summary-json``: per-module acquire / external wait / produce percentiles,
  per-event latency, throughput, Triton's statistics), like CMSSW's ``resources.json``;
* ``traceFile``: a Chrome trace-event JSON (opens in https://ui.perfetto.dev or
  chrome://tracing) with one track per stream: each event as a span, and inside it each
  module's ``acquire``, ``external wait`` and ``produce``/``filter``/``analyze``/``write``.

Example::

    process.FastTimerService = cms.Service("FastTimerService",
        writeJSONSummary=cms.untracked.bool(True), jsonFileName=cms.untracked.string("resources.json"),
        traceFile=cms.untracked.string("trace.json"))
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from framework.core import EventPrincipal, Service

__all__ = ["FastTimerService", "Tracer"]


class Tracer:
    """Collects spans (stream, name, phase, start, end) in ``time.perf_counter`` seconds.

    ``span`` may be called from worker threads (a lock keeps the list consistent).
    """

    def __init__(self) -> None:
        self._spans: list[tuple[int, str, str, str, float, float]] = []
        self._lock = threading.Lock()

    def span(self, principal: EventPrincipal, label: str, phase: str, t0: float, t1: float) -> None:
        with self._lock:
            self._spans.append((principal.stream, str(principal.id), label, phase, t0, t1))

    def event(self, principal: EventPrincipal, t0: float, t1: float) -> None:
        self.span(principal, "event", "event", t0, t1)

    def chrome_trace(self) -> dict[str, Any]:
        """The spans as a Chrome trace-event document (``ts``/``dur`` in microseconds)."""
        with self._lock:
            spans = list(self._spans)
        origin = min((s[4] for s in spans), default=0.0)
        events: list[dict[str, Any]] = []
        for stream in sorted({s[0] for s in spans}):
            events.append(
                {"ph": "M", "name": "thread_name", "pid": 1, "tid": stream, "args": {"name": f"stream {stream}"}}
            )
        for stream, event_id, label, phase, t0, t1 in spans:
            name = f"event {event_id}" if label == "event" else f"{label} {phase}"
            events.append(
                {
                    "ph": "X",
                    "pid": 1,
                    "tid": stream,
                    "name": name,
                    "cat": "event" if label == "event" else phase,
                    "ts": (t0 - origin) * 1e6,
                    "dur": max(t1 - t0, 0.0) * 1e6,
                    "args": {"event": event_id, "module": label, "phase": phase},
                }
            )
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write(self, path: str, who: str = "FastTimerService: traceFile") -> None:
        _write_json(path, self.chrome_trace(), who)


def _write_json(path: str, data: Any, who: str) -> None:
    from framework.io import atomic_write  # staged with the job's commit: renamed if the job succeeded

    with atomic_write(Path(path), who) as tmp:
        tmp.write_text(json.dumps(data))


class FastTimerService(Service):
    """Writes the timing summary and/or a timeline trace at the end of a successful job.

    Both files are written after every module's ``end_job`` and renamed into place with the
    job's other outputs (``framework.utilities._commit``). Not with ``--executor dask``, where every
    worker would write its own at the end of its job (the run's summary: ``--summary-json``).
    """

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        from framework import config as cms

        desc.add("writeJSONSummary", cms.untracked.bool(False), "write the timing summary as JSON")
        desc.add("jsonFileName", cms.untracked.string("resources.json"), "file for the JSON summary")
        desc.add(
            "traceFile", cms.untracked.string(""), "Chrome trace-event JSON for Perfetto / chrome://tracing ('' = none)"
        )

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.tracer = Tracer() if params.traceFile else None

    def declared_outputs(self) -> dict[str, Any]:
        outputs = {"jsonFileName": self.params.jsonFileName} if self.params.writeJSONSummary else {}
        return outputs | ({"traceFile": self.params.traceFile} if self.params.traceFile else {})

    def subscribe(self, activity: Any) -> None:
        if self.tracer is not None:
            activity.post_module_phase.connect(self.tracer.span)
            activity.post_event.connect(self.tracer.event)
        if self.params.writeJSONSummary or self.tracer is not None:
            activity.post_end_job.connect(self.job_finished)

    def job_finished(self, job: Any, report: Any) -> None:
        from framework.io import output_path  # per dataset when cmsrun runs datasets

        from ._summary import summary_dict

        if self.params.writeJSONSummary:
            _write_json(
                str(output_path(self.params.jsonFileName)), summary_dict(job, report), "FastTimerService: jsonFileName"
            )
        if self.tracer is not None:
            self.tracer.write(str(output_path(self.params.traceFile)))
