"""Loading a config file with its command-line arguments, as ``cmsRun`` does.

``load_config(path, ["maxEvents=10", "inputFiles=a.root,b.root"])`` runs the file as
plain Python and returns its ``process``. While it runs, ``sys.argv`` is ``[path, *args]``
(CMSSW: everything after the config's name is the config's), so both
``VarParsing.parseArguments()`` and ``argparse`` read them; a config that reads neither
while given arguments is an error. Fragments (``*_cff``, ``*_cfi``, ``*_cfg`` modules)
imported while it runs are forgotten afterwards, and the Modifiers it chose are unchosen, so
that the next config loaded in the same interpreter starts from fresh fragments and unchosen
Modifiers, as a new cmsRun does (and its first ``cms.Process`` may choose Modifiers again).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, SupportsIndex

from framework.utilities import ConfigurationError, FrameworkError, UsageError

from ._modifiers import CHOSEN
from ._process import Process
from ._sequences import Task, _ModuleSequence
from ._varparsing import VarParsing, _Arguments, current_arguments

__all__ = ["VarParsing", "load_config"]

# One config runs at a time: sys.argv and sys.modules are the interpreter's.
_LOCK = threading.RLock()
_FRAGMENT = re.compile(r"_cf[fig]$")


class _Argv(list[str]):
    """``sys.argv`` while a config runs; records whether its arguments were read (argparse)."""

    read = False

    def __getitem__(self, index: Any) -> Any:
        if not (isinstance(index, SupportsIndex) and index.__index__() == 0):
            self.read = True
        return super().__getitem__(index)

    def __iter__(self) -> Any:
        self.read = True
        return super().__iter__()


def load_config(path: str | os.PathLike[str], args: Sequence[str] = ()) -> Process:
    """Run the config file at ``path`` and return its validated ``process``.

    The file runs with its own globals (``__file__`` set, ``__name__`` =
    ``"__config__"``) and with its directory first on ``sys.path`` (for ``_cff``
    fragments next to it) while it runs.

    Args:
        path: the ``_cfg.py`` file.
        args: ``name=value`` strings for the config's :class:`VarParsing`.

    Raises:
        SystemExit: the config exited (its argparse's ``--help`` or usage error, VarParsing's
            ``help``), as it would under cmsRun.
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
    arguments = _Arguments(list(args))
    argv = _Argv([filename, *args])
    with _LOCK:
        _run(code, namespace, filename, arguments, argv)

    process = namespace.get("process")
    if process is None:
        raise ConfigurationError(f"{filename}: defines no 'process' (expected process = cms.Process(\"NAME\"))")
    if not isinstance(process, Process):
        raise ConfigurationError(f"{filename}: 'process' is a {type(process).__name__}, expected a cms.Process")
    if arguments.args and not arguments.parsed and not argv.read:
        if set(arguments.args) & {"help", "--help", "-h"}:
            raise UsageError(
                f"config {filename} has no options of its own (it reads neither VarParsing nor sys.argv); "
                "'cmsrun --help' lists cmsrun's"
            )
        raise ConfigurationError(
            f"config {filename} does not take arguments (it reads neither VarParsing nor sys.argv): "
            f"{' '.join(arguments.args)}"
        )
    # Looked for before resolve(), which would recurse without end over such a cycle (and
    # could leave a Task half-rebuilt when the RecursionError hits it).
    cycle = containment_cycle(process)
    if cycle is not None:
        raise ConfigurationError(f"{filename}: {cycle}")
    try:
        process.resolve()  # SequencePlaceholders, as cmsRun does before running
        process.validate_()
    except ConfigurationError as e:
        raise ConfigurationError(f"{filename}: {e.args[0]}") from None
    except RecursionError:
        raise ConfigurationError(
            f"{filename}: a Sequence or Task contains itself (too deeply nested to tell which)"
        ) from None
    return process


def containment_cycle(process: Process) -> str | None:
    """The first of ``process``'s Sequences and Tasks found that contains itself, directly
    or through others (``"Sequence 's1' contains itself (s1 -> s2 -> s1)"``), or None. CMSSW's
    own language recurses without end over such a cycle."""

    def children(node: Any) -> list[Any]:
        items = list(getattr(node, "_items", []))
        items += list(getattr(node, "_tasks", []))
        return [i for i in items if isinstance(i, (_ModuleSequence, Task))]

    state: dict[int, int] = {}  # 1: on the current chain, 2: done

    def visit(node: Any, chain: list[Any]) -> list[Any] | None:
        state[id(node)] = 1
        for child in children(node):
            if state.get(id(child)) == 1:
                return [*chain[[id(c) for c in chain].index(id(child)) :], child]
            if id(child) not in state and (cycle := visit(child, [*chain, child])):
                return cycle
        state[id(node)] = 2
        return None

    roots = [o for o in process._objects.values() if isinstance(o, (_ModuleSequence, Task))]
    for root in roots:
        if id(root) not in state and (cycle := visit(root, [root])):
            names = " -> ".join(c._label or f"(unlabelled {c._kind})" for c in cycle)
            return f"{cycle[0]._what_()} contains itself ({names})"
    return None


def _run(code: Any, namespace: dict[str, Any], filename: str, arguments: _Arguments, argv: _Argv) -> None:
    directory = os.path.dirname(os.path.abspath(filename))
    sys.path.insert(0, directory)
    saved_argv, sys.argv = sys.argv, argv
    # Fragments imported before (by a test, another config's caller) are hidden while the
    # config runs, so that its process.load gets fresh objects: a config that changes a
    # loaded object (servers.append, say) must not change the next config's.
    hidden = {name: sys.modules.pop(name) for name in list(sys.modules) if _FRAGMENT.search(name)}
    chosen_before = len(CHOSEN)
    current_arguments.append(arguments)
    # A config runs as a new cmsRun: its first Process may choose Modifiers.
    first_process, Process._firstProcess = Process._firstProcess, True
    try:
        exec(code, namespace)
    except Exception as e:  # noqa: BLE001 - every failure of user code becomes one error line
        raise (UsageError if isinstance(e, UsageError) else ConfigurationError)(_describe_failure(e, filename)) from e
    finally:
        Process._firstProcess = first_process
        current_arguments.pop()
        sys.argv = saved_argv
        for modifier in CHOSEN[chosen_before:]:
            modifier._chosen = False
        del CHOSEN[chosen_before:]
        for name in [name for name in sys.modules if _FRAGMENT.search(name)]:
            del sys.modules[name]
        sys.modules.update(hidden)
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
    kind = "ConfigurationError" if isinstance(error, ConfigurationError) else type(error).__name__
    return f"{filename}:{line}: {kind}: {message}{inner}"


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
