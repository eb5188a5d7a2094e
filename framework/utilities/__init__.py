"""The bottom layer: what every other package of the framework shares, and nothing else.

As CMSSW's ``FWCore/Utilities`` (``cms::Exception``, the exit codes) sits below both its
configuration language and its framework, this package sits below ``framework.config`` and
``framework.core``; it imports no other part of pysonic, and neither trio, ROOT nor Triton.

Files:

* ``_errors``: the error hierarchy (:class:`~framework.FrameworkError` and its categories); every
  error names its culprit in one line.
* ``_ports``: what a TCP port number may be (:func:`check_port`), for every server address.
* ``_paths``: where the project's own ``data/`` folder and model repository are.
* ``_owners``: owner tags of temporary files and folders (pid, start time, host), and the
  removal of those whose owner is gone (:func:`remove_orphans`).
* ``_commit``: a job's outputs committed together (:func:`commit_outputs`): every writer
  stages its file under a temporary name (:func:`stage_output`), renamed into place only
  when the whole job (or work unit) succeeded; the signals that stop a job
  (``STOP_SIGNALS``, :func:`stop_signals_handled`), held while a commit renames.
* ``triton_config``: the one reader of a Triton model's ``config.pbtxt`` shared by the
  client (``framework.sonic``) and the server side (``framework.serving``). A public module
  of its own, not imported here: it loads tritonclient's model-config schema, which the
  core must not.
"""

from ._commit import STOP_SIGNALS as STOP_SIGNALS
from ._commit import OutputCommit as OutputCommit
from ._commit import StagedFile as StagedFile
from ._commit import commit_outputs as commit_outputs
from ._commit import current_commit as current_commit
from ._commit import stage_output as stage_output
from ._commit import stop_signals_handled as stop_signals_handled
from ._commit import temporary_name as temporary_name
from ._errors import ConfigurationError as ConfigurationError
from ._errors import EventProcessingError as EventProcessingError
from ._errors import ExternalFailure as ExternalFailure
from ._errors import FileOpenError as FileOpenError
from ._errors import FileReadError as FileReadError
from ._errors import FileWriteError as FileWriteError
from ._errors import FrameworkError as FrameworkError
from ._errors import NotSupportedError as NotSupportedError
from ._errors import ProductNotFound as ProductNotFound
from ._errors import UsageError as UsageError
from ._owners import OWNER_PATTERN as OWNER_PATTERN
from ._owners import host_id as host_id
from ._owners import owner_alive as owner_alive
from ._owners import owner_tag as owner_tag
from ._owners import remove_orphans as remove_orphans
from ._paths import default_model_repository as default_model_repository
from ._paths import project_data_directory as project_data_directory
from ._ports import PORT_RANGE as PORT_RANGE
from ._ports import check_port as check_port
