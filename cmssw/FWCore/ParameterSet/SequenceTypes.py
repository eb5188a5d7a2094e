"""CMSSW's ``FWCore.ParameterSet.SequenceTypes``: Sequence, Path, EndPath, Task, Schedule."""

from framework.config import EndPath, Path, Schedule, Sequence, Task  # noqa: F401 - re-exported names
