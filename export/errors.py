"""The one error type of the export stage: a proof failed or the input cannot be exported.

Every message names what mismatched (which output, shape, batch, length, tolerance) so the
command line can print it as it is and exit non-zero.
"""

from __future__ import annotations


class ExportError(Exception):
    """The run cannot be exported, or the exported graph failed one of its proofs."""


class ExportRequestError(ExportError):
    """What was asked cannot be exported: a bad name, version, option or run directory.

    The command line reports it as a usage error (exit status 2); every other ExportError is
    a proof that failed (exit status 1).
    """


class ParityError(ExportError):
    """onnxruntime's outputs differ from PyTorch's beyond the tolerance, or break a masking rule."""


class QuantizationRefused(ExportError):
    """The quantized graph lost more held-out accuracy than allowed, or its outputs strayed from
    PyTorch's past the declared tolerance."""
