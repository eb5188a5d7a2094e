"""Loading a config file, and its command-line arguments (CMSSW's ``VarParsing``).

``load_config(path, ["maxEvents=10", "inputFiles=a.root,b.root"])`` runs the file as
plain Python and returns its ``process``. The ``name=value`` arguments reach the config
only through ``VarParsing.parseArguments()``: ``load_config`` puts them in a context
variable for the duration of the run (no ``sys.argv`` games), and complains if the config
never asked for them.
"""

from __future__ import annotations

import contextvars
import enum
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigurationError, FrameworkError
from ._process import Process
from ._types import closest

__all__ = ["VarParsing", "load_config"]


class _Arguments:
    """The arguments of the config being loaded, and whether it parsed them."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.parsed = False


_current_args: contextvars.ContextVar[_Arguments | None] = contextvars.ContextVar(
    "framework_config_arguments", default=None
)


def load_config(path: str | os.PathLike[str], args: Sequence[str] = ()) -> Process:
    """Run the config file at ``path`` and return its validated ``process``.

    The file runs with its own globals (``__file__`` set, ``__name__`` =
    ``"__config__"``) and with its directory first on ``sys.path`` (for ``_cff``
    fragments next to it) while it runs.

    Args:
        path: the ``_cfg.py`` file.
        args: ``name=value`` strings for the config's :class:`VarParsing`.

    Raises:
        ConfigurationError: naming the file: missing file; syntax error (file:line);
            exception while running (file:line of the config, type, message); no
            ``process``, or not a ``cms.Process``; arguments given to a config that
            does not parse them; ``process.validate_()`` failed.
    """
    filename = os.fspath(path)
    try:
        with open(filename, encoding="utf-8") as f:
            source = f.read()
    except FileNotFoundError:
        raise ConfigurationError(f"config file '{filename}' not found") from None
    except OSError as e:
        raise ConfigurationError(f"config file '{filename}' cannot be read: {e.strerror or e}") from None
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as e:
        raise ConfigurationError(f"{filename}:{e.lineno}: syntax error: {e.msg}") from None

    namespace: dict[str, Any] = {"__file__": filename, "__name__": "__config__", "__builtins__": __builtins__}
    arguments = _Arguments(args)
    _run(code, namespace, filename, arguments)

    process = namespace.get("process")
    if process is None:
        raise ConfigurationError(f"{filename}: defines no 'process' (expected process = cms.Process(\"NAME\"))")
    if not isinstance(process, Process):
        raise ConfigurationError(f"{filename}: 'process' is a {type(process).__name__}, expected a cms.Process")
    if arguments.args and not arguments.parsed:
        raise ConfigurationError(
            f"config {filename} does not take arguments (it has no VarParsing): {' '.join(arguments.args)}"
        )
    try:
        process.validate_()
    except ConfigurationError as e:
        raise ConfigurationError(f"{filename}: {e.args[0]}") from None
    return process


def _run(code: Any, namespace: dict[str, Any], filename: str, arguments: _Arguments) -> None:
    directory = os.path.dirname(os.path.abspath(filename))
    sys.path.insert(0, directory)
    token = _current_args.set(arguments)
    try:
        exec(code, namespace)
    except Exception as e:  # noqa: BLE001 - every failure of user code becomes one error line
        raise ConfigurationError(_describe_failure(e, filename)) from e
    finally:
        _current_args.reset(token)
        try:
            sys.path.remove(directory)  # the first occurrence: ours, unless the config moved it
        except ValueError:
            pass


def _describe_failure(error: Exception, filename: str) -> str:
    """``"<file>:<line>: <Type>: <message>"`` at the config's line, plus the innermost
    location when the error came from another file (a fragment the config imported)."""
    frames = traceback.extract_tb(error.__traceback__)
    in_config = [f for f in frames if f.filename == filename]
    line = in_config[-1].lineno if in_config else "?"
    message = error.args[0] if isinstance(error, FrameworkError) and error.args else str(error)
    inner = ""
    if isinstance(error, SyntaxError) and error.filename and error.filename != filename:
        inner = f" (at {error.filename}:{error.lineno})"
    elif frames and frames[-1].filename != filename:
        last = frames[-1]
        # Our own frames (framework/config) and importlib's ("<frozen ...>") say nothing new.
        if not last.filename.startswith((_PACKAGE_DIR, "<")):
            inner = f" (at {last.filename}:{last.lineno})"
    return f"{filename}:{line}: {type(error).__name__}: {message}{inner}"


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class VarParsing:
    """Command-line ``name=value`` arguments of a config (CMSSW's ``VarParsing``, simplified).

    Example::

        options = cms.VarParsing()
        options.register("inputFiles", [], cms.VarParsing.multiplicity.list,
                         cms.VarParsing.varType.string, "input files")
        options.register("maxEvents", -1, cms.VarParsing.multiplicity.singleton,
                         cms.VarParsing.varType.int, "events to process")
        options.parseArguments()
        process.maxEvents.input = options.maxEvents

    A list argument takes comma-separated values and may be repeated
    (``inputFiles=a.root,b.root inputFiles=c.root``); giving it replaces the default.
    Booleans read ``true/false/1/0/yes/no`` (any case). ``VarParsing("analysis")``
    pre-registers CMSSW's analysis options: inputFiles, outputFile, maxEvents,
    secondaryInputFiles.
    """

    class multiplicity(enum.Enum):  # noqa: N801 - CMSSW spelling
        singleton = "singleton"
        list = "list"

    class varType(enum.Enum):  # noqa: N801 - CMSSW spelling
        int = "int"
        float = "float"
        string = "string"
        bool = "bool"

    def __init__(self, preset: str | None = None) -> None:
        object.__setattr__(self, "_vars", {})
        if preset == "analysis":
            m, t = self.multiplicity, self.varType
            self.register("inputFiles", [], m.list, t.string, "input files")
            self.register("secondaryInputFiles", [], m.list, t.string, "secondary input files")
            self.register("outputFile", "output.root", m.singleton, t.string, "output file")
            self.register("maxEvents", -1, m.singleton, t.int, "events to process (-1 = all)")
        elif preset is not None:
            raise ConfigurationError(f"VarParsing: unknown preset {preset!r} (known: 'analysis')")

    def register(
        self,
        name: str,
        default: Any = None,
        mult: VarParsing.multiplicity = multiplicity.singleton,
        mytype: VarParsing.varType = varType.int,
        info: str = "",
    ) -> None:
        """Declare an argument (CMSSW's argument order and names).

        Raises:
            ConfigurationError: name already registered or not an identifier, bad
                multiplicity/type, or a default that does not fit the type.
        """
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ConfigurationError(f"VarParsing.register: invalid name {name!r}")
        if name in self._vars or hasattr(type(self), name):
            raise ConfigurationError(f"VarParsing.register: '{name}' is already registered or reserved")
        if not isinstance(mult, self.multiplicity) or not isinstance(mytype, self.varType):
            raise ConfigurationError(
                f"VarParsing.register('{name}'): use VarParsing.multiplicity.* and VarParsing.varType.*"
            )
        if mult is self.multiplicity.list:
            default = [] if default is None else default
            if not isinstance(default, (list, tuple)):
                raise ConfigurationError(f"VarParsing.register('{name}'): a list argument needs a list default")
            value: Any = [_check_default(name, mytype, d) for d in default]
        else:
            value = None if default is None else _check_default(name, mytype, default)
        self._vars[name] = _Var(mult, mytype, info, value)

    def parseArguments(self) -> None:  # noqa: N802 - CMSSW spelling
        """Apply the ``name=value`` arguments given to ``load_config`` (none outside it).

        Raises:
            ConfigurationError: naming the argument: not ``name=value``, unknown name
                (listing the registered ones), value not convertible, singleton given twice.
        """
        arguments = _current_args.get()
        if arguments is None:
            return
        arguments.parsed = True
        given: set[str] = set()
        for arg in arguments.args:
            self._apply(arg, given)

    def _apply(self, arg: str, given: set[str]) -> None:
        name, sep, text = arg.partition("=")
        if not sep:
            raise ConfigurationError(f"argument '{arg}' is not of the form name=value")
        var = self._vars.get(name)
        if var is None:
            raise ConfigurationError(
                f"unknown argument '{name}' ({closest(name, self._vars)}); registered: {', '.join(self._vars)}"
            )
        if var.mult is self.multiplicity.singleton:
            if name in given:
                raise ConfigurationError(f"argument '{name}' given twice")
            var.value = _parse(name, var.type, text)
        else:
            if name not in given:
                var.value = []  # the command line replaces the default list
            var.value += [_parse(name, var.type, t) for t in text.split(",") if t != ""]
        given.add(name)

    def setDefault(self, name: str, value: Any) -> None:  # noqa: N802 - CMSSW spelling
        setattr(self, name, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._vars[name].value
        except KeyError:
            raise AttributeError(f"VarParsing has no argument '{name}' ({closest(name, self._vars)})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        var = self._vars.get(name)
        if var is None:
            raise ConfigurationError(f"VarParsing has no argument '{name}' ({closest(name, self._vars)})")
        if var.mult is self.multiplicity.list:
            var.value = [_check_default(name, var.type, v) for v in value]
        else:
            var.value = _check_default(name, var.type, value)

    def __str__(self) -> str:
        return "\n".join(
            f"{n} ({v.type.value}{', list' if v.mult is self.multiplicity.list else ''}) = {v.value!r}: {v.info}"
            for n, v in self._vars.items()
        )


class _Var:
    def __init__(self, mult: VarParsing.multiplicity, type_: VarParsing.varType, info: str, value: Any) -> None:
        self.mult, self.type, self.info, self.value = mult, type_, info, value


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _parse(name: str, type_: VarParsing.varType, text: str) -> Any:
    """A command-line string as the argument's type."""
    t = VarParsing.varType
    try:
        if type_ is t.int:
            return int(text, 0)  # 0: also accepts 0x.. like C++ stoi-with-base-0
        if type_ is t.float:
            return float(text)
        if type_ is t.bool:
            if text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise ValueError(text)
        return text
    except ValueError:
        raise ConfigurationError(f"argument '{name}={text}': expected {type_.value}, got {text!r}") from None


def _check_default(name: str, type_: VarParsing.varType, value: Any) -> Any:
    t = VarParsing.varType
    is_bool = isinstance(value, bool)
    ok = {
        t.int: isinstance(value, int) and not is_bool,
        t.float: isinstance(value, (int, float)) and not is_bool,
        t.bool: is_bool,
        t.string: isinstance(value, str),
    }[type_]
    if not ok:
        raise ConfigurationError(f"VarParsing '{name}': expected {type_.value}, got {value!r}")
    return float(value) if type_ is t.float else value
