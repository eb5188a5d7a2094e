"""TritonService: the thin layer that joins the SONIC client to the Triton servers.

Layering: the layer joining ``framework.sonic`` (the client) and ``framework.serving`` (the
servers); what it may import is written once, in :mod:`framework`. It holds what needs
both sides:

* ``_fallback``: the fallback server's life (start on demand, restart, load, stop): a
  :class:`~framework.serving.LocalTritonServer` behind the client's
  :class:`~framework.sonic._routing.Fallback` interface;
* ``_service_stats``: the end-of-job numbers and tables (client counters and Triton's
  own statistics);
* ``_service``: :class:`TritonService` (CMSSW's ``TritonService``, a framework ``Service``):
  parameters, discovery of what each server serves and assignment at begin_job, the
  fallback when no server serves a model, end_job;
* ``_twins``: a model's SONIC producer and its direct (in-process onnxruntime, through the
  server side's ONNX runner) twin sharing one conversion: :class:`ModelConversion`,
  :class:`SonicConversionProducer`, :class:`OnnxDirectProducer`.
"""

from ._service import TritonService as TritonService
from ._twins import ModelConversion as ModelConversion
from ._twins import OnnxDirectProducer as OnnxDirectProducer
from ._twins import SonicConversionProducer as SonicConversionProducer
