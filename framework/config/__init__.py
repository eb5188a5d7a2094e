"""The config language, used as ``import framework.config as cms`` (CMSSW's ``FWCore.ParameterSet``).

- typed parameters (``_types``): ``cms.int32(4)``, ``cms.vstring("a")``,
  ``cms.InputTag("jets:pt")``, ``cms.FileInPath("RecoBTag/.../config.pbtxt")``; ``cms.PSet(...)``, ``cms.VPSet(...)``,
  ``cms.untracked.X`` (``_pset``);
- module declarations (``_modules``): ``cms.EDProducer("TypeName", **params)``, ...;
- scheduling (``_sequences``): ``cms.Sequence``, ``cms.Task``, ``cms.Path``,
  ``cms.EndPath``, ``cms.Schedule``;
- ``cms.Process`` (``_process``), whose docstring lists the API the framework reads;
- ``cms.ParameterSetDescription`` and the validated ``cms.ParameterSet`` (``_description``);
- ``cms.load_config`` and ``cms.VarParsing`` (``_loader``, ``_varparsing``);
- ``cms.Modifier``, ``cms.ModifierChain``, ``cms.ProcessModifier`` (``_modifiers``);
- ``cms.SwitchProducer`` (``_modules``) and ``cms.ProcessAccelerator`` (``_accelerators``): a
  producer chosen per accelerator, ``process.options.accelerators``;
- ``cms.required``/``cms.optional``/``cms.allowed``: placeholders of generated cfis (``_pset``).

CMSSW's own import names (``import FWCore.ParameterSet.Config as cms``) are thin aliases of
this package, kept in the repository's ``cmssw/`` folder.

Pure Python: nothing here knows about trio, uproot or Triton.
"""

from typing import Any

from framework.utilities import ConfigurationError as ConfigurationError
from framework.utilities import NotSupportedError

from ._accelerators import ProcessAccelerator as ProcessAccelerator
from ._accelerators import ProcessForProcessAccelerator as ProcessForProcessAccelerator
from ._description import DescriptionRow as DescriptionRow
from ._description import ParameterSet as ParameterSet
from ._description import ParameterSetDescription as ParameterSetDescription
from ._loader import load_config as load_config
from ._modifiers import Modifier as Modifier
from ._modifiers import ModifierChain as ModifierChain
from ._modifiers import ProcessModifier as ProcessModifier
from ._modules import EDAlias as EDAlias
from ._modules import EDAnalyzer as EDAnalyzer
from ._modules import EDFilter as EDFilter
from ._modules import EDProducer as EDProducer
from ._modules import ESPrefer as ESPrefer
from ._modules import ESProducer as ESProducer
from ._modules import ESSource as ESSource
from ._modules import Looper as Looper
from ._modules import OutputModule as OutputModule
from ._modules import Service as Service
from ._modules import Source as Source
from ._modules import SwitchProducer as SwitchProducer
from ._process import Process as Process
from ._process import ProcessFragment as ProcessFragment
from ._process import SubProcess as SubProcess
from ._pset import ParameterHolder as ParameterHolder
from ._pset import ProxyParameter as ProxyParameter
from ._pset import PSet as PSet
from ._pset import PSetTemplate as PSetTemplate
from ._pset import SecSource as SecSource
from ._pset import VPSet as VPSet
from ._pset import allowed as allowed
from ._pset import optional as optional
from ._pset import required as required
from ._pset import untracked as untracked
from ._ranges import EventID as EventID
from ._ranges import EventRange as EventRange
from ._ranges import LuminosityBlockID as LuminosityBlockID
from ._ranges import LuminosityBlockRange as LuminosityBlockRange
from ._ranges import VEventID as VEventID
from ._ranges import VEventRange as VEventRange
from ._ranges import VLuminosityBlockID as VLuminosityBlockID
from ._ranges import VLuminosityBlockRange as VLuminosityBlockRange
from ._sequences import ConditionalTask as ConditionalTask
from ._sequences import ConditionalTaskPlaceholder as ConditionalTaskPlaceholder
from ._sequences import EndPath as EndPath
from ._sequences import FinalPath as FinalPath
from ._sequences import Labelable as Labelable
from ._sequences import Path as Path
from ._sequences import Schedule as Schedule
from ._sequences import Sequence as Sequence
from ._sequences import SequencePlaceholder as SequencePlaceholder
from ._sequences import Task as Task
from ._sequences import TaskPlaceholder as TaskPlaceholder
from ._sequences import ignore as ignore
from ._sequences import wait as wait
from ._types import ESInputTag as ESInputTag
from ._types import FileInPath as FileInPath
from ._types import InputTag as InputTag
from ._types import VESInputTag as VESInputTag
from ._types import VInputTag as VInputTag
from ._types import _bool, _ParameterTypeBase
from ._types import double as double
from ._types import int32 as int32
from ._types import int64 as int64
from ._types import string as string
from ._types import uint32 as uint32
from ._types import uint64 as uint64
from ._types import vbool as vbool
from ._types import vdouble as vdouble
from ._types import vint32 as vint32
from ._types import vint64 as vint64
from ._types import vstring as vstring
from ._types import vuint32 as vuint32
from ._types import vuint64 as vuint64
from ._varparsing import VarParsing as VarParsing
from ._varparsing import host_port as host_port

# CMSSW's configuration names for features pysonic does not have: a one-line "not supported"
# instead of a bare AttributeError (NotSupportedError is one, so hasattr(cms, X) is False).
# (cms.Looper, cms.SubProcess and cms.SecSource exist: configs build them unconditionally; a job
# that holds one is refused when it is built, by Process.checkRunnable_.)
_NOT_SUPPORTED = {
    "EDLooper": "there are no loopers: run the job again",
}


def __getattr__(name: str) -> Any:
    if name in _NOT_SUPPORTED:
        raise NotSupportedError(f"cms.{name}", _NOT_SUPPORTED[name])
    raise AttributeError(f"module 'framework.config' (cms) has no attribute '{name}'")


# CMSSW's cms.bool: an assignment, not "import ... as bool", so that it is re-exported
# explicitly (mypy, ruff's F401); _types keeps the builtin's name for itself.
bool = _bool  # noqa: A001

# The base classes configs test against (isinstance), for CMSSW's FWCore.ParameterSet.Mixins
# (_Parameterizable = ParameterHolder, _ProxyParameter, _Labelable, _ParameterTypeBase);
# not in __all__: a config's "from ... import *" gets the language, not these.
ParameterTypeBase = _ParameterTypeBase

__all__ = [
    "ConditionalTaskPlaceholder",
    "Looper",
    "ProcessAccelerator",
    "ProcessForProcessAccelerator",
    "SecSource",
    "SubProcess",
    "SwitchProducer",
    "TaskPlaceholder",
    "SequencePlaceholder",
    "ConditionalTask",
    "VLuminosityBlockRange",
    "VLuminosityBlockID",
    "VEventRange",
    "VEventID",
    "LuminosityBlockRange",
    "LuminosityBlockID",
    "EventRange",
    "EventID",
    "FinalPath",
    "ProcessFragment",
    "vbool",
    "ESInputTag",
    "FileInPath",
    "wait",
    "ignore",
    "PSetTemplate",
    "EDAlias",
    "ConfigurationError",
    "DescriptionRow",
    "EDAnalyzer",
    "EDFilter",
    "EDProducer",
    "ESPrefer",
    "ESProducer",
    "ESSource",
    "EndPath",
    "InputTag",
    "Modifier",
    "ModifierChain",
    "OutputModule",
    "PSet",
    "ParameterSet",
    "ParameterSetDescription",
    "Path",
    "Process",
    "ProcessModifier",
    "Schedule",
    "Sequence",
    "Service",
    "Source",
    "Task",
    "VESInputTag",
    "VInputTag",
    "VPSet",
    "VarParsing",
    "host_port",
    "allowed",
    "bool",
    "double",
    "int32",
    "int64",
    "load_config",
    "optional",
    "required",
    "string",
    "uint32",
    "uint64",
    "untracked",
    "vdouble",
    "vint32",
    "vint64",
    "vstring",
    "vuint32",
    "vuint64",
]
