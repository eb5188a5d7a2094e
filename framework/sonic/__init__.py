"""SONIC: inference as a service on NVIDIA Triton (CMSSW's HeterogeneousCore/Sonic*).

Layering: this subpackage is the only part of the framework that knows about Triton
(tritonclient, the tritonserver binary). It builds on the core's ExternalWork and bridge.
"""
