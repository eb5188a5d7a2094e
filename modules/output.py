"""``NanoAODOutputModule``: write selected events to a flat NanoAOD-style TTree.

Branch names and the tree writing are ``framework.io``'s (see ``framework/io/_writer.py``:
``Jet`` gives ``nJet`` + ``Jet_<field>``, a product ``(label, instance)`` is named
``label`` or ``label_instance``, its value decides its branches). This module adds the
CMSSW selection: ``outputCommands`` are keep/drop statements applied in order, with
``fnmatch`` globs, to those branch names; the last matching statement decides, and a
branch no statement matches is dropped. ``run``, ``luminosityBlock`` and ``event`` are
always written. A product's fields are only known at the first written event: it is
consumed if a pattern may keep one of its branches, and its fields are chosen then. A
kept product named ``<name>`` replaces the input's branches ``<name>`` and ``<name>_*``
(a tagger rerun as ``FatJet_particleNet`` writes its ``FatJet_particleNet_*``, not the
input's).
"""

from __future__ import annotations

import fnmatch
import logging
from pathlib import Path
from typing import Any

import framework.config as cms
from framework import ConfigurationError, Event, OutputModule
from framework.io import ID_BRANCHES, BranchBuffer, TreeWriter, compression, id_columns, output_path

__all__ = ["NanoAODOutputModule", "OutputCommands"]

log = logging.getLogger("pysonic.output")


class OutputCommands:
    """CMSSW ``outputCommands``: ``"keep <glob>"`` / ``"drop <glob>"``, last match wins.

    Raises:
        ConfigurationError: a statement is not ``keep``/``drop`` followed by one pattern.
    """

    def __init__(self, commands: list[str], context: str) -> None:
        self.rules: list[tuple[bool, str]] = []
        for command in commands:
            parts = command.split()
            if len(parts) != 2 or parts[0] not in ("keep", "drop"):
                raise ConfigurationError(
                    f"{context}: outputCommands entry {command!r} is not 'keep <pattern>' or 'drop <pattern>'"
                )
            self.rules.append((parts[0] == "keep", parts[1]))

    def keep(self, branch: str) -> bool:
        """Whether ``branch`` is written."""
        decision = False
        for keep, pattern in self.rules:
            if fnmatch.fnmatchcase(branch, pattern):
                decision = keep
        return decision

    def may_keep_fields(self, name: str) -> bool:
        """Whether some branch ``<name>_<field>`` (field unknown yet) may be kept.

        True if a keep pattern can match such a name: the pattern's literal start (up to
        its first wildcard) and ``<name>_`` agree. Over-approximates; fields are decided
        for good once the first event shows them.
        """
        prefix = name + "_"
        for keep, pattern in self.rules:
            literal = pattern[: min((pattern.find(c) for c in "*?[" if c in pattern), default=len(pattern))]
            if keep and (prefix.startswith(literal) or literal.startswith(prefix)):
                return True
        return False


class NanoAODOutputModule(OutputModule):
    """Writes the selected events to a NanoAOD-style TTree (CMSSW's ``NanoAODOutputModule``).

    See the module docstring for branch names and ``outputCommands``. The file is written
    under a temporary name (``<fileName>.tmp-<pid>-...``), closed in ``end_unit`` and renamed
    to ``fileName`` once the whole job succeeded (``framework.utilities._commit``), so a failed job
    leaves no partial file and replaces no earlier one. Events are written in the order they reach the module (with
    several streams this is not the input order); ``run``/``luminosityBlock``/``event``
    identify them. With zero selected events the file holds an empty tree with the id
    branches only (the other branches' types are known from the first event).

    Not thread-safe (``write`` runs on the scheduler's thread); a flush, every
    ``basketSize`` events, writes on that thread too.

    Raises:
        ConfigurationError: bad ``outputCommands``, an unknown Path in ``SelectEvents``.
        FileOpenError: the output cannot be created (in ``begin_job``, before any event).
        TypeError: (wrapped by the framework) a product has a type that cannot be written or
            changes type between events.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("fileName", cms.untracked.string, "output ROOT file")
        desc.add(
            "outputCommands",
            cms.untracked.vstring("keep *"),
            "keep/drop <glob> statements over branch names, applied in order",
        )
        select = cms.ParameterSetDescription()
        select.add("SelectEvents", cms.vstring(), "Path names; an event is written if any accepted it (empty: all)")
        desc.add("SelectEvents", select, "which events to write", tracked=False)
        desc.add("treeName", cms.untracked.string("Events"), "name of the output TTree")
        desc.add("basketSize", cms.untracked.uint32(1000), "events per TTree basket (one write per basket)")
        desc.add("compressionAlgorithm", cms.untracked.string("ZLIB"), "ZLIB, LZMA, LZ4 or ZSTD")
        desc.add_optional(
            "compressionLevel",
            cms.untracked.uint32,
            "1-9; absent: 1, uproot's default (CMSSW's NanoAOD productions use LZMA 9)",
        )

    def __init__(self, params: cms.ParameterSet) -> None:
        context = f"OutputModule '{self.label}'"
        self.file_name = Path(params.fileName)
        self.commands = OutputCommands(list(params.outputCommands), context)
        self.select_paths = list(params.SelectEvents.SelectEvents)
        self.tree_name = params.treeName
        self.basket_size = max(1, int(params.basketSize))
        self.compression = compression(params.compressionAlgorithm, params.get("compressionLevel"), context)
        self.items: list[BranchBuffer] = []
        self.context = context
        self.writer = TreeWriter(self.file_name, self.tree_name, self.compression, context)
        self._ids: list[tuple[int, int, int]] = []
        self._paths_checked = False
        self.events_written = 0

    def declared_outputs(self) -> dict[str, Any]:
        return {"fileName": self.file_name}

    @property
    def temp_name(self) -> Path | None:
        """Where the file is written until the job's outputs are committed (None before
        ``begin_unit``)."""
        return self.writer.temp_name

    def select(self, registry: Any) -> None:
        """Apply ``outputCommands`` to source branches and products; consume what is kept."""
        for name, fields in registry.source_collections.items():
            if name in ID_BRANCHES:
                continue
            if not fields:
                if self.commands.keep(name):
                    self.consumes(name, branches=())
                    self.items.append(BranchBuffer(name, name, f"source branch '{name}'", ()))
                continue
            kept = tuple(f for f in fields if self.commands.keep(f"{name}_{f}"))
            if kept:
                self.consumes(name, branches=kept)
                self.items.append(BranchBuffer(name, name, f"source collection '{name}'", kept))
        for product in registry.products:
            name = product.label if not product.instance else f"{product.label}_{product.instance}"
            if self.commands.keep(name) or self.commands.may_keep_fields(name):
                clash = next((i for i in self.items if i.name == name), None)
                if clash is not None or name in ID_BRANCHES:
                    raise ConfigurationError(
                        f"OutputModule '{self.label}': product '{name}' of module '{product.label}' "
                        f"would write the branches of {clash.what if clash else 'the event id'}; "
                        f"drop one of them with outputCommands or rename the module"
                    )
                tag = (product.label, product.instance)
                self.consumes(tag)
                self.items.append(BranchBuffer(name, tag, f"product '{name}' of module '{product.label}'", None))
                self._yield_source_branches(name)

    def _yield_source_branches(self, name: str) -> None:
        """A product's branches replace the source's of the same names (a tagger rerun replaces
        the input's scores): source fields named ``<name>`` or ``<name>_*`` are not written."""
        for item in self.items:
            if isinstance(item.tag, str) and item.fields:
                kept = tuple(f for f in item.fields if not (f"{item.name}_{f}" + "_").startswith(name + "_"))
                if kept != item.fields:
                    log.info(
                        "OutputModule '%s': product '%s' replaces the input's branches %s",
                        self.label,
                        name,
                        ", ".join(f"{item.name}_{f}" for f in item.fields if f not in kept),
                    )
                    item.fields = kept

    def begin_unit(self) -> None:
        """Create the temporary output file. Raises FileOpenError naming the path.

        The file is ``framework.io.output_path(fileName)``: ``fileName`` itself, or the
        dataset's or work unit's name for it when cmsrun runs datasets or units (a new
        file for every unit; CMSSW's ``OutputModule::openFile``).
        """
        self.writer = TreeWriter(output_path(self.file_name), self.tree_name, self.compression, self.context)
        self.events_written = 0
        self._ids = []
        self.writer.open()

    def selected(self, event: Event) -> bool:
        """``SelectEvents``: whether any listed Path accepted ``event`` (no list: all)."""
        if not self.select_paths:
            return True
        results = event.path_results
        if not self._paths_checked:
            unknown = [p for p in self.select_paths if p not in results]
            if unknown:
                raise ConfigurationError(
                    f"OutputModule '{self.label}': SelectEvents names Path '{unknown[0]}', which is "
                    f"not a Path of this process (Paths: {', '.join(sorted(results)) or 'none'})"
                )
            self._paths_checked = True
        return any(results[p] for p in self.select_paths)

    def write(self, event: Event) -> None:
        """Buffer ``event``'s branches; every ``basketSize`` events, write a basket."""
        self._ids.append(event.id)  # an EventID is a (run, lumi, event) tuple
        for item in self.items:
            item.add(event.get(item.tag), self.commands.keep, event)
        if len(self._ids) >= self.basket_size:
            self._flush()

    def _flush(self) -> None:
        data: dict[str, Any] = id_columns(self._ids)
        for item in self.items:
            data.update(item.take())
        self.writer.extend(data)
        self.events_written += len(self._ids)
        self._ids = []

    def end_unit(self) -> None:
        """Write the last basket and close the file (renamed to ``fileName`` at the commit)."""
        if not self.writer.is_open:
            return
        if self._ids or self.writer.entries == 0:
            self._flush()  # with zero events: the empty tree of the id branches
        self.writer.close()
        log.info("OutputModule '%s' wrote %d events to %s", self.label, self.events_written, self.writer.path)

    def abort_unit(self) -> None:
        """Close and delete the temporary file: a failed job leaves no output."""
        self.writer.abort()
        for item in self.items:
            if item.writers:
                item.take()  # drop what a failed unit buffered
        self._ids = []
