"""CMSSW's ``FWCore.ParameterSet.Modules``: module declarations, from ``framework.config``."""

from framework.config import (  # noqa: F401 - re-exported names
    EDAlias,
    EDAnalyzer,
    EDFilter,
    EDProducer,
    ESPrefer,
    ESProducer,
    ESSource,
    Looper,
    OutputModule,
    Service,
    Source,
    SwitchProducer,
)
