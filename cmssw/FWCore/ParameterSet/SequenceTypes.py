"""CMSSW's ``FWCore.ParameterSet.SequenceTypes``: Sequence, Path, EndPath, Task, Schedule, ..."""

from framework.config import (  # noqa: F401 - re-exported names
    ConditionalTask,
    ConditionalTaskPlaceholder,
    EndPath,
    FinalPath,
    Path,
    Schedule,
    Sequence,
    SequencePlaceholder,
    Task,
    TaskPlaceholder,
    ignore,
    wait,
)
