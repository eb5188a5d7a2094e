"""Signals a service can watch: CMSSW's ``ActivityRegistry``, for the framework's own hooks.

A service subscribes in :meth:`~framework.Service.subscribe` (called by the builder once per
job, after every service and module is constructed), e.g. ``activity.post_event.connect(cb)``;
the framework emits the signals, and a service is never looked up by name to be fed.
Callbacks run on the trio thread; they must be quick and must not raise. A signal with no subscriber costs
one truth test on the hot path.

Signals (all times ``time.perf_counter`` seconds):

* ``post_module_phase(principal, label, phase, t0, t1)``: a module finished a phase of an
  event: ``"acquire"`` and ``"external wait"`` (ExternalWork), then ``"produce"``,
  ``"filter"``, ``"analyze"``, ``"write"`` or ``"run"`` (CMSSW: ``watchPostModuleEvent``,
  ``watchPostModuleEventAcquire``);
* ``post_event(principal, t0, t1)``: an event left the EndPaths (``watchPostEvent``);
* ``post_end_job(job, report)``: the job ended successfully; after every module's and
  service's ``end_job``, so the services' end-of-job numbers are in (``watchPostEndJob``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ActivityRegistry", "Signal"]


class Signal:
    """Callbacks called in subscription order with the signal's arguments."""

    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        self._callbacks: list[Callable[..., None]] = []

    def connect(self, callback: Callable[..., None]) -> None:
        """Call ``callback`` at every emission from now on."""
        self._callbacks.append(callback)

    def __bool__(self) -> bool:
        return bool(self._callbacks)

    def __call__(self, *args: Any) -> None:
        for callback in self._callbacks:
            callback(*args)


class ActivityRegistry:
    """The job's signals (see the module docstring)."""

    __slots__ = ("post_end_job", "post_event", "post_module_phase")

    def __init__(self) -> None:
        self.post_module_phase = Signal()
        self.post_event = Signal()
        self.post_end_job = Signal()
