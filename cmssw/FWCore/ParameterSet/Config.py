"""CMSSW's ``FWCore.ParameterSet.Config``: ``import FWCore.ParameterSet.Config as cms``.

The same objects as ``framework.config`` (``cms.PSet is framework.config.PSet``).
"""

from framework.config import *  # noqa: F403 - the whole configuration language, by design
from framework.config import __all__ as __all__
from framework.config import __getattr__ as __getattr__  # cms.SwitchProducer & co.: "not supported by pysonic"
