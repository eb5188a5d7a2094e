"""Where the project's own files are: its ``data/`` folder and the model repository in it.

The bottom layer (framework.utilities), so that the SONIC client (``framework.sonic``), the server side
(``framework.serving``) and the configuration language find the same folders without
importing each other.
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["default_model_repository", "project_data_directory"]


def project_data_directory() -> pathlib.Path:
    """The project's ``data/`` folder, ``<repository root>/data``."""
    return pathlib.Path(__file__).resolve().parents[2] / "data"


def default_model_repository() -> pathlib.Path:
    """The project's model repository, ``<repository root>/data/models``, or ``$PYSONIC_MODEL_REPOSITORY``."""
    override = os.environ.get("PYSONIC_MODEL_REPOSITORY")
    if override:
        return pathlib.Path(override)
    return project_data_directory() / "models"
