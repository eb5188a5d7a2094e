"""The framework's errors: one base class with a category, as CMSSW's cms::Exception.

Every error names its culprit (module label and type, path, event id, file, model,
parameter) in a single line, so that ``cmsrun`` can print it and exit non-zero.
"""

from __future__ import annotations


class FrameworkError(Exception):
    """Base of every error the framework raises on purpose.

    Attributes:
        category: CMSSW-style exception category (``"Configuration"``,
            ``"ProductNotFound"``, ``"FileOpenError"``, ``"FileReadError"``,
            ``"ExternalFailure"``, ``"EventProcessing"``, ...), used by the
            summary and, later, by the exception policy of ``process.options``.
    """

    category = "Unknown"

    def __init__(self, message: str, *, category: str | None = None) -> None:
        super().__init__(message)
        if category is not None:
            self.category = category

    def __str__(self) -> str:
        return f"[{self.category}] {super().__str__()}"


class ConfigurationError(FrameworkError):
    """A config is invalid: unknown module type or parameter, wrong type, missing value."""

    category = "Configuration"


class UsageError(ConfigurationError):
    """A command-line argument is wrong (a config's ``name=value``): cmsrun exits with 2."""


class NotSupportedError(ConfigurationError, AttributeError):
    """A CMSSW feature pysonic does not run (a job with a ``cms.Looper``, a SubProcess, a
    ``cms.SecSource``; ``cms.EDLooper``). An AttributeError too, so that ``hasattr`` stays False."""

    def __init__(self, feature: str, why: str = "") -> None:
        super().__init__(f"{feature} is a CMSSW feature not supported by pysonic{f' ({why})' if why else ''}")


class ProductNotFound(FrameworkError):
    """``event.get`` asked for a product that nobody put into the event."""

    category = "ProductNotFound"


class FileOpenError(FrameworkError):
    """An input file cannot be opened or is not a usable ROOT file.

    Attributes:
        file: the file name or URL, when known (None otherwise).
    """

    category = "FileOpenError"

    def __init__(self, message: str, *, file: str | None = None, category: str | None = None) -> None:
        super().__init__(message, category=category)
        self.file = file


class FileWriteError(FrameworkError):
    """An output cannot be written or committed (full disk, a folder removed meanwhile).

    Attributes:
        file: the output's final name, when about one file (None otherwise).
    """

    category = "FileWriteError"

    def __init__(self, message: str, *, file: str | None = None, category: str | None = None) -> None:
        super().__init__(message, category=category)
        self.file = file


class FileReadError(FrameworkError):
    """An input file opened, but reading a branch failed (truncated, wrong type, ...).

    The message says it all in one line; the same facts are attributes, as uproot's
    ``KeyInFileError`` carries its key, so that callers never parse the message (the
    scheduler names the modules that consume ``collection``).

    Attributes:
        file: the file name or URL (None when not about one file, e.g. a merge).
        collection: the source collection concerned (``"Jet"`` for ``Jet_pt``), or None.
        branch: the branch concerned (``"Jet_pt"``), or None.
        nearest: names that do exist and are closest to a missing one (may be empty).
        entries: the half-open entry range ``(start, stop)`` being read, or None.
    """

    category = "FileReadError"

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        collection: str | None = None,
        branch: str | None = None,
        nearest: tuple[str, ...] = (),
        entries: tuple[int, int] | None = None,
        category: str | None = None,
    ) -> None:
        super().__init__(message, category=category)
        self.file = file
        self.collection = collection
        self.branch = branch
        self.nearest = tuple(nearest)
        self.entries = entries


class ExternalFailure(FrameworkError):
    """External work (an inference server call) failed or returned something unusable.

    The message says it all in one line; the same facts are attributes, so that callers
    (the retry policy, the shared-memory recovery, tests) never parse the message.

    Attributes:
        model: the model name, when about one model (None otherwise).
        server: the name of the server that failed (None: not about one server).
        status: the gRPC status name of the failure (``"UNAVAILABLE"``,
            ``"DEADLINE_EXCEEDED"``, ...; Triton answers with gRPC status codes), or None
            when no call failed (malformed outputs, configuration found at run time).
        tries: the tries made before giving up (None: not a request's final error).
        retryable: whether another try (here or elsewhere) may succeed.
    """

    category = "ExternalFailure"

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        server: str | None = None,
        status: str | None = None,
        tries: int | None = None,
        retryable: bool = False,
        category: str | None = None,
    ) -> None:
        super().__init__(message, category=category)
        self.model = model
        self.server = server
        self.status = status
        self.tries = tries
        self.retryable = retryable


class EventProcessingError(FrameworkError):
    """A module raised while processing an event; the message names module, path and event.

    The original exception is kept as ``__cause__``.
    """

    category = "EventProcessing"
