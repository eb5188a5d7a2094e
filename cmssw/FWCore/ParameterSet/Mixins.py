"""CMSSW's ``FWCore.ParameterSet.Mixins``: the base classes configs test against, from ``framework.config``."""

from framework.config import Labelable as _Labelable  # noqa: F401
from framework.config import ParameterHolder as _Parameterizable  # noqa: F401
from framework.config import ParameterTypeBase as _ParameterTypeBase  # noqa: F401
from framework.config import ProxyParameter as _ProxyParameter  # noqa: F401


class PrintOptions:
    """CMSSW's dump options; accepted by ``dumpPython(options)``, which always writes CMSSW's layout."""

    def __init__(self, indent: int = 0, deltaIndent: int = 4, process: bool = True, targetDirectory: str | None = None):  # noqa: N803
        self.indent_, self.deltaIndent, self.isCfg, self.targetDirectory = indent, deltaIndent, process, targetDirectory
