"""Sphinx configuration: the pages under docs/ (Markdown, through MyST) and the API reference
generated from the docstrings of the public packages.

Built and checked by ``.ci/run``: ``python -m sphinx -b html -n -W --keep-going docs
docs/_build/html``. Nitpicky: every cross-reference in a docstring or a page must resolve,
so a renamed or moved name fails CI instead of leaving a dead link. There is no
intersphinx (CI reaches no documentation site), so references to other projects' names
(the standard library, numpy, trio, ...) are let through below by namespace, and only
those: the project's own names are never ignored.
"""

from __future__ import annotations

project = "pysonic"
author = "pysonic developers"
copyright = "pysonic developers"  # Sphinx's setting name

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]

# The site's pages are docs/*.md; the README stays the repository's front page (it links
# here) and is not part of the site. performance/ holds the figures the pages show; the
# benchmarks' runs behind them are in ../bench-results/, outside the site.
exclude_patterns = ["_build"]
source_suffix = {".md": "markdown"}
root_doc = "index"

nitpicky = True
myst_heading_anchors = 3

# Public names are documented where users import them (``framework.sonic.TritonClient``);
# autodoc marks the implementation module's name (``framework.sonic._client.TritonClient``)
# as canonical, so signatures and docstrings that use either resolve to the same entry.
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
# The types of attributes come from their annotations in the signatures, not from napoleon
# (which splits "tuple[str, ...]" at its comma).
napoleon_attr_annotations = False

# Other projects' namespaces, which intersphinx would resolve if CI could reach their docs.
# Matched against the whole target (Sphinx uses re.fullmatch), so ``framework.io.X`` is never
# let through; the standard library's ``io`` is left out so that a bare ``io.X`` (a slip for
# ``framework.io.X``) still fails. Today's references use collections, pathlib, os, enum,
# types, numpy, awkward, trio, tritonclient (as grpcclient), distributed, rich, hist and
# protobuf (google); the rest are the project's other dependencies.
_EXTERNAL = (
    # the standard library
    "_thread|abc|argparse|array|asyncio|collections|concurrent|contextlib|dataclasses|datetime|enum|"
    "functools|ipaddress|itertools|json|logging|multiprocessing|os|pathlib|queue|re|signal|"
    "socket|ssl|subprocess|sys|tempfile|threading|time|types|typing|typing_extensions|weakref|"
    # third-party libraries
    "trio|outcome|numpy|np|npt|awkward|ak|uproot|hist|rich|yaml|grpc|tritonclient|grpcclient|"
    "google|onnxruntime|torch|dask|distributed|filelock|stamina|fsspec|XRootD|matplotlib"
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({_EXTERNAL})(\..*)?"),
]

html_theme = "alabaster"
html_title = "pysonic"


def _public_bases(bases: list[type]) -> list[type]:
    """A class's bases as the API shows them: a private base (``_Vector``, in an underscored
    module or with an underscored name and not re-exported) is replaced by its own bases,
    until public ones remain. The private classes are implementation, not API."""
    public: list[type] = []
    for base in bases:
        private = base.__name__.startswith("_") or (
            base.__module__.startswith(("framework", "modules")) and not _exported(base)
        )
        for found in _public_bases(list(base.__bases__)) if private else [base]:
            if found not in public and found is not object:
                public.append(found)
    return public


def _exported(cls: type) -> bool:
    """Whether a project class is importable from a public module (``framework.sonic``)."""
    import importlib

    parts = cls.__module__.split(".")
    public = ".".join(p for p in parts if not p.startswith("_"))
    try:
        return getattr(importlib.import_module(public), cls.__name__, None) is cls
    except ImportError:
        return False


def _process_bases(app, name, obj, options, bases: list[type]) -> None:
    bases[:] = _public_bases(bases) or [object]


def _resolve_alias(app, env, node, contnode):
    """Resolve a project name that the API lists under another name, and only those.

    * ``framework.config._types._bool``: the object is exported under another name
      (``framework.config.bool``): the reference goes to that entry;
    * a ``TypeVar`` in a signature (``framework.sonic._data.T``): not a documentable
      object; shown as plain text.

    Anything else stays unresolved, and the build fails on it (nitpicky).
    """
    import importlib
    import typing

    from sphinx.util.nodes import make_refnode

    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith(("framework.", "modules.")):
        return None
    module_name, _, name = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None
    if isinstance(obj, typing.TypeVar):
        return contnode
    public = ".".join(p for p in module_name.split(".") if not p.startswith("_"))
    objects = env.get_domain("py").objects
    for attr, value in vars(importlib.import_module(public)).items():
        entry = objects.get(f"{public}.{attr}")
        if value is obj and entry is not None:
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode)
    return None


def _process_signature(app, what, name, obj, options, signature, return_annotation):
    """A dataclass field's ``default_factory`` shows as ``<factory>``, which Sphinx cannot
    parse (it then splits the whole signature at its commas): shown as ``...``."""
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "..."), return_annotation
    return None


def setup(app):
    app.connect("autodoc-process-bases", _process_bases)
    app.connect("missing-reference", _resolve_alias)
    app.connect("autodoc-process-signature", _process_signature)
