"""CMSSW's ``FWCore.ParameterSet.Mixins``: the base classes configs test against, from ``framework.config``."""

from framework.config._pset import ParameterHolder as _Parameterizable  # noqa: F401
from framework.config._pset import ProxyParameter as _ProxyParameter  # noqa: F401
from framework.config._sequences import Labelable as _Labelable  # noqa: F401
from framework.config._types import _ParameterTypeBase as _ParameterTypeBase  # noqa: F401
