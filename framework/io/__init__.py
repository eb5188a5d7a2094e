"""ROOT input and output: everything that reads or writes event files, with uproot/awkward.

The data path is config -> builder -> scheduler -> **io** -> modules -> sonic: the
scheduler asks a :class:`~framework.Source` for events and calls output modules; this
package is where those events come from and where they go.

Files (implementation modules are underscored; the names below are the public ones):

* ``_files``: opening input files, with one-line errors for missing, damaged and
  non-ROOT files.
* ``_layout``: a NanoAOD tree's collections (``Jet`` from ``nJet``, ``Jet_pt``, ...) and
  the check of a branch request against a file.
* ``_chunks``: chunk-wide collections from one read (:class:`JaggedChunk`, ...).
* ``_views``: the per-event views into them that modules get (:class:`JaggedView`,
  :class:`SingletonView`: awkward objects whose fields are NumPy views of the chunk).
* ``_remote``: remote inputs: ``root://`` and ``https://`` URLs, ``/store/...`` names
  through redirectors (:class:`RemoteAccess`), bounded opens and reads, retries.
* ``_pool_source``: :class:`PoolSource`, CMSSW's source of events from ROOT files;
  ``_report``: its summary table of remote inputs.
* ``_fileset``: datasets from coffea filesets (JSON/YAML) (:func:`load_fileset`).
* ``_units``: preprocessing (entry counts, clusters; :func:`preprocess_file`, cached) and
  the split of a dataset into :class:`WorkUnit` entry ranges (:func:`split_units`).
* ``_parts``: output names per dataset and per unit (:func:`output_path`,
  :func:`output_naming`), and the merge of unit parts into one file (:func:`merge_parts`).
* ``_outputs``: output paths checked before the first event (:func:`check_outputs`),
  temporary names that carry their owner, and the removal of those a killed job left.
* ``_writer``: NanoAOD-style branches from per-event values (:class:`BranchBuffer`), a
  TTree file written atomically (:class:`TreeWriter`, :func:`atomic_write`: staged with
  the job's commit, ``framework.utilities._commit``).
* ``_tfileservice``: :class:`TFileService`, CMSSW's service of histograms and small
  per-event tables (:class:`Table`) that modules book, one directory per module label,
  written through the job's commit and merged per dataset under Dask.
* ``samples``: the real CMS sample files, located or fetched and checksum-verified
  (``python -m framework.io.samples NAME``).

What it may import (and what may import it): :mod:`framework`, the one place the layering
is written (``PoolSource`` is found by name through the registry).
"""

from ._chunks import JaggedChunk as JaggedChunk
from ._chunks import SingletonChunk as SingletonChunk
from ._fileset import Dataset as Dataset
from ._fileset import FileSpec as FileSpec
from ._fileset import dataset_file_tag as dataset_file_tag
from ._fileset import load_fileset as load_fileset
from ._fileset import parse_fileset as parse_fileset
from ._layout import scan_tree as scan_tree
from ._outputs import check_outputs as check_outputs
from ._outputs import output_folders as output_folders
from ._outputs import remove_stale_temporaries as remove_stale_temporaries
from ._outputs import temporary_name as temporary_name
from ._parts import MergeReport as MergeReport
from ._parts import dataset_output_path as dataset_output_path
from ._parts import final_path as final_path
from ._parts import in_work_unit as in_work_unit
from ._parts import merge_parts as merge_parts
from ._parts import merge_unit_parts as merge_unit_parts
from ._parts import new_run_name as new_run_name
from ._parts import output_naming as output_naming
from ._parts import output_path as output_path
from ._parts import part_path as part_path
from ._parts import parts_folder as parts_folder
from ._parts import remove_stale_runs as remove_stale_runs
from ._parts import run_parts_folder as run_parts_folder
from ._pool_source import PoolSource as PoolSource
from ._pool_source import SourceStatistics as SourceStatistics
from ._remote import OpenedFile as OpenedFile
from ._remote import RemoteAccess as RemoteAccess
from ._tfileservice import BookedObjects as BookedObjects
from ._tfileservice import Table as Table
from ._tfileservice import TFileDirectory as TFileDirectory
from ._tfileservice import TFileService as TFileService
from ._units import DEFAULT_CHUNK_SIZE as DEFAULT_CHUNK_SIZE
from ._units import FileInfo as FileInfo
from ._units import PreprocessCache as PreprocessCache
from ._units import WorkUnit as WorkUnit
from ._units import limit_units as limit_units
from ._units import preprocess as preprocess
from ._units import preprocess_file as preprocess_file
from ._units import split_units as split_units
from ._views import JaggedView as JaggedView
from ._views import SingletonView as SingletonView
from ._writer import COMPRESSION as COMPRESSION
from ._writer import ID_BRANCHES as ID_BRANCHES
from ._writer import BranchBuffer as BranchBuffer
from ._writer import TreeWriter as TreeWriter
from ._writer import atomic_write as atomic_write
from ._writer import compression as compression
from ._writer import id_columns as id_columns
from ._writer import write_objects as write_objects
