"""The base classes of the model modules: one data conversion, run by Triton (SONIC) or in-process.

A model module writes its data conversion once on :class:`ModelConversion` and gets two
producers from it: :class:`SonicConversionProducer` (the model served by Triton, as
ExternalWork) and :class:`OnnxDirectProducer` (the same ONNX file run in the job with
onnxruntime), so that a config switches between them by type name (``modules/deepmet.py``
is the short example)::

    from framework.inference import ModelConversion, OnnxDirectProducer, SonicConversionProducer

Layering: with ``framework.service``, it imports both SONIC sides: the client
(``framework.sonic``: the producer and its tensors) and the server side's runtime
(``framework.serving``: the ONNX runner and the model-config reading); what it may import
is written once, in :mod:`framework`.

Files, in the direction of their imports:

* ``_producers``: :class:`ModelConversion`, :class:`SonicConversionProducer`,
  :class:`OnnxDirectProducer`.
"""

from ._producers import ModelConversion as ModelConversion
from ._producers import OnnxDirectProducer as OnnxDirectProducer
from ._producers import SonicConversionProducer as SonicConversionProducer
