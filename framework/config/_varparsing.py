"""Command-line options of a config (CMSSW's ``FWCore/ParameterSet/python/VarParsing.py``).

``parseArguments()`` reads ``sys.argv`` after the config's name, as CMSSW's does: under
``cmsrun cfg.py a=1`` (``load_config`` sets ``sys.argv = [cfg.py, "a=1"]`` while the config
runs) and under ``python cfg.py a=1``. Imported by another program, nothing is parsed.
"""

from __future__ import annotations

import enum
import sys
from typing import Any

from framework.utilities import PORT_RANGE, ConfigurationError, UsageError

from ._types import closest

__all__ = ["VarParsing"]


class _Arguments:
    """The arguments of the config being loaded (set by ``load_config``), and whether read."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.parsed = False


# The arguments of the config that load_config runs now (None outside load_config).
current_arguments: list[_Arguments] = []


class VarParsing:
    """Command-line ``name=value`` options of a config, with CMSSW's semantics.

    Example::

        options = VarParsing("analysis")
        options.register("models", "resnet", VarParsing.multiplicity.list, VarParsing.varType.string, "models")
        options.parseArguments()

    - A list option takes comma-separated values and may be repeated on the command line
      (``inputFiles=a.root,b.root inputFiles=c.root``); the first one given replaces the
      default (unless ``setNoDefaultClear``). Its default may be a list or a scalar
      (``""`` or None: empty). Assigning to it in the config appends (``options.models =
      "x"``), as in CMSSW; ``setDefault`` and ``clearList`` replace and clear.
    - ``varType.tagString``: a string to which the tags set up with ``setupTags`` are added
      before its extension. The ``"analysis"`` preset registers CMSSW's ``maxEvents``,
      ``totalSections``, ``section``, ``inputFiles``, ``secondaryInputFiles``,
      ``filePrepend``, ``outputFile`` (``output.root``; ``output_numEvent10.root`` with
      ``maxEvents=10``), ``secondaryOutputFile`` and ``tag`` (added last: ``_<tag>``); CMSSW's
      older ``"standard"`` preset ``maxEvents``, ``files``, ``secondaryFiles``, ``output``
      (tagged as ``outputFile``) and ``secondaryOutput``.
    - Booleans read ``true/false/t/f/1/0/yes/no/on/off`` (any case); ints also ``0x..``.
    - The arguments ``print`` or ``--print`` (print the options) and ``help`` or ``--help``
      (print them and exit), as CMSSW's; ``-h`` too (a pysonic extension), so that
      ``cmsrun cfg.py -h`` lists the config's options as ``--help`` does;
      ``name_clear`` empties a list option and ``name_load=FILE`` adds the lines of FILE.

    Raises:
        ConfigurationError: naming the option: unknown name (with the nearest), a value
            that does not convert, a singleton given twice, a default of the wrong type.
    """

    class multiplicity(enum.Enum):  # noqa: N801 - CMSSW spelling
        singleton = "singleton"
        list = "list"

    class varType(enum.Enum):  # noqa: N801 - CMSSW spelling
        bool = "bool"
        int = "int"
        float = "float"
        string = "string"
        tagString = "tagString"  # noqa: N815

    def __init__(self, *presets: str) -> None:
        d = self.__dict__
        d["_vars"] = {}
        d["_tags"] = []
        for preset in presets:
            if preset.lower() == "analysis":
                self._register_analysis()
            elif preset.lower() == "standard":
                self._register_standard()
            elif preset.lower() != "python":  # CMSSW accepts "python": nothing to do
                raise ConfigurationError(f"VarParsing: unknown preset {preset!r} (known: 'analysis', 'standard')")

    def _register_standard(self) -> None:
        # CMSSW's older preset: files/output instead of inputFiles/outputFile.
        m, t = self.multiplicity, self.varType
        self.register("maxEvents", -1, m.singleton, t.int, "Number of events to process (-1 for all)")
        self.register("files", "", m.list, t.string, "Files to process")
        self.register("secondaryFiles", "", m.list, t.string, "Second group of files to process (if needed)")
        self.register("output", "output.root", m.singleton, t.tagString, "Name of output file (if needed)")
        self.register("secondaryOutput", "", m.singleton, t.tagString, "Name of second output file (if needed)")
        self.setupTags(tag="numEvent%d", ifCond="maxEvents > 0", tagArg="maxEvents")

    def _register_analysis(self) -> None:
        m, t = self.multiplicity, self.varType
        self.register("maxEvents", -1, m.singleton, t.int, "Number of events to process (-1 for all)")
        self.register("totalSections", 0, m.singleton, t.int, "Total number of sections")
        self.register("section", 0, m.singleton, t.int, "This section (from 1..totalSections inclusive)")
        self.register("inputFiles", "", m.list, t.string, "Files to process")
        self.register("secondaryInputFiles", "", m.list, t.string, "Second group of files to process (if needed)")
        self.register("filePrepend", "", m.singleton, t.string, "String to prepend location of all files")
        self.register("outputFile", "output.root", m.singleton, t.tagString, "Name of output file (if needed)")
        self.register("secondaryOutputFile", "", m.singleton, t.tagString, "Name of second output file (if needed)")
        self.register("tag", "", m.singleton, t.string, "tag to add to output filename")
        self.setupTags(tag="numEvent%d", ifCond="maxEvents > 0", tagArg="maxEvents")
        self.setupTags(tag="%s", ifCond="tag", tagArg="tag")

    def register(
        self,
        name: str,
        default: Any = None,
        mult: VarParsing.multiplicity = multiplicity.singleton,
        mytype: VarParsing.varType = varType.int,
        info: str = "",
        **_: Any,
    ) -> None:
        """Declare an option (CMSSW's argument order and names).

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
        var = _Var(mult, mytype, info)
        self._vars[name] = var
        if mult is self.multiplicity.list:
            var.value = [_check(name, mytype, d) for d in _as_list(default)]
        else:
            var.value = None if default is None else _check(name, mytype, default)

    def setupTags(self, tag: str = "", ifCond: str = "", tagArg: str = "") -> None:  # noqa: N802, N803
        """Add ``_<tag>`` (``tag % option tagArg``) to tagString options when ``ifCond`` (an
        expression over the options) holds; tags are added in the order set up."""
        self._tags.append((tag, ifCond, tagArg))

    def setDefault(self, name: str, *values: Any) -> None:  # noqa: N802 - CMSSW spelling
        """Replace the value of ``name`` (a list option takes several values)."""
        var = self._var(name)
        if var.mult is self.multiplicity.list:
            var.value = [_check(name, var.type, v) for vs in values for v in _as_list(vs)]
        else:
            (value,) = values
            var.value = _check(name, var.type, value)

    def clearList(self, name: str) -> None:  # noqa: N802
        self._var(name).value = []

    def setNoDefaultClear(self, name: str, value: bool = True) -> None:  # noqa: N802
        """Values given on the command line add to the default list instead of replacing it."""
        self._var(name).no_default_clear = value

    def setNoCommaSplit(self, name: str, value: bool = True) -> None:  # noqa: N802
        """Command-line values of this list option are not split at commas."""
        self._var(name).no_comma_split = value

    def setType(self, name: str, mytype: VarParsing.varType) -> None:  # noqa: N802
        self._var(name).type = mytype

    def has_key(self, name: str) -> bool:
        return name in self._vars

    def __contains__(self, name: str) -> bool:
        return name in self._vars

    def parseArguments(self) -> None:  # noqa: N802 - CMSSW spelling
        """Apply the ``name=value`` arguments after the config's name (see the module docstring)."""
        if current_arguments:
            arguments = current_arguments[-1]
            arguments.parsed = True
            args = arguments.args
        elif _called_from_main():
            args = sys.argv[1:]  # python cfg.py name=value ...
        else:
            return
        given: set[str] = set()
        for arg in args:
            self._apply(arg, given)

    def _apply(self, arg: str, given: set[str]) -> None:
        if arg in ("print", "--print", "help", "--help", "-h"):
            print(self)
            if "help" in arg or arg == "-h":
                raise SystemExit(0)
            return
        name, sep, text = arg.partition("=")
        if text.startswith("="):  # CMSSW's would take "=x.root" as the value: a typo, never meant
            raise UsageError(f"argument '{arg}': one '=' between name and value ({name}={text.lstrip('=')})")
        base, _, suffix = name.rpartition("_")
        list_var = self._vars.get(base)
        if suffix in ("clear", "load") and list_var is not None and list_var.mult is self.multiplicity.list:
            # CMSSW's list suffixes: name_clear empties the list, name_load=FILE adds its lines.
            if suffix == "clear":
                list_var.value = []
            else:
                list_var.value += [_parse(base, list_var.type, t) for t in _read_list(name, text)]
            given.add(base)
            return
        if not sep:
            raise UsageError(f"argument '{arg}' is not of the form name=value")
        var = self._vars.get(name)
        if var is None:
            hint = closest(name, self._vars)  # lists them all when none is near: once is enough
            every = "" if hint.startswith("valid") else f"; valid: {', '.join(self._vars)}"
            raise UsageError(f"unknown argument '{name}' ({hint}){every}")
        if var.mult is self.multiplicity.singleton:
            if name in given:
                raise UsageError(f"argument '{name}' given twice")
            var.value = _parse(name, var.type, text)
        else:
            if name not in given and not var.no_default_clear:
                var.value = []  # the command line replaces the default list
            texts = [text] if var.no_comma_split else [t for t in text.split(",") if t != ""]
            var.value += [_parse(name, var.type, t) for t in texts]
        given.add(name)

    def _var(self, name: str) -> _Var:
        try:
            var: _Var = self._vars[name]
            return var
        except KeyError:
            raise ConfigurationError(f"VarParsing has no argument '{name}' ({closest(name, self._vars)})") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        var = self.__dict__["_vars"].get(name)
        if var is None:
            raise AttributeError(f"VarParsing has no argument '{name}' ({closest(name, self._vars)})")
        if var.type is self.varType.tagString and var.value:
            return self._with_tags(var.value)
        return var.value

    def _with_tags(self, value: str) -> str:
        values = {n: v.value for n, v in self._vars.items()}
        tags = ""
        for tag, condition, tag_arg in self._tags:
            if condition and not eval(condition, {}, values):  # noqa: S307 - CMSSW's setupTags contract
                continue
            tags += "_" + (tag % values[tag_arg] if tag_arg else tag)
        if not tags:
            return value
        stem, dot, ext = value.rpartition(".")
        return f"{stem}{tags}.{ext}" if dot else value + tags

    def __setattr__(self, name: str, value: Any) -> None:
        var = self._var(name)
        if var.mult is self.multiplicity.list:
            var.value += [_check(name, var.type, v) for v in _as_list(value)]  # CMSSW: appends
        else:
            var.value = _check(name, var.type, value)

    def __str__(self) -> str:
        lines = []
        for n, v in self._vars.items():
            kind = f"{v.type.value}{', list' if v.mult is self.multiplicity.list else ''}"
            lines.append(f"{n} ({kind}) = {getattr(self, n)!r}" + (f": {v.info}" if v.info else ""))
        return "\n".join(lines)


class _Var:
    def __init__(self, mult: VarParsing.multiplicity, type_: VarParsing.varType, info: str) -> None:
        self.mult, self.type, self.info = mult, type_, info
        self.value: Any = None
        self.no_default_clear = False
        self.no_comma_split = False


def _read_list(name: str, filename: str) -> list[str]:
    """The entries of a list file: one per line, blank lines and ``#`` comments skipped."""
    try:
        with open(filename, encoding="utf-8") as f:
            lines = [line.split("#", 1)[0].strip() for line in f]
    except OSError as e:
        raise ConfigurationError(f"argument '{name}={filename}': cannot read the file: {e.strerror or e}") from None
    return [line for line in lines if line]


def _called_from_main() -> bool:
    # parseArguments' caller is the script python runs (python cfg.py ...): frame 2 up.
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__") == "__main__"


def _as_list(value: Any) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


_TRUE, _FALSE = ("true", "t", "1", "yes", "on"), ("false", "f", "0", "no", "off")


def _parse(name: str, type_: VarParsing.varType, text: str) -> Any:
    """A command-line string as the option's type."""
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
        raise UsageError(f"argument '{name}={text}': expected {type_.value}, got {text!r}") from None


def _check(name: str, type_: VarParsing.varType, value: Any) -> Any:
    t = VarParsing.varType
    is_bool = isinstance(value, bool)
    if hasattr(value, "value") and callable(value.value) and not isinstance(value, (list, str)):
        value = value.value()  # a typed parameter (cms.int32(3)) stands for its value
        is_bool = isinstance(value, bool)
    ok = {
        t.int: isinstance(value, int) and not is_bool,
        t.float: isinstance(value, (int, float)) and not is_bool,
        t.bool: is_bool,
        t.string: isinstance(value, str),
        t.tagString: isinstance(value, str),
    }[type_]
    if not ok:
        raise ConfigurationError(f"VarParsing '{name}': expected {type_.value}, got {value!r}")
    return float(value) if type_ is t.float else value


def host_port(text: str, option: str) -> tuple[str, int]:
    """``"host:port"`` (a config's option, e.g. ``server=127.0.0.1:8001``) -> (host, port).

    A pysonic helper (CMSSW's configs split the string themselves): the port must be a TCP
    port, since gRPC would take 117611 modulo 65536 and dial another server.

    Raises:
        ~framework.utilities.UsageError: no ``:``, no host, or a port that is not a number in
            ``PORT_RANGE`` (names ``option`` and the value as typed).
    """
    host, _, port = text.rpartition(":")
    low, high = PORT_RANGE
    if not host or not port.isdigit() or not low <= int(port) <= high:
        raise UsageError(f"argument '{option}={text}': expected host:port with a TCP port ({low}-{high})")
    return host, int(port)
