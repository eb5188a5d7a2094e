"""The real CMS sample files (public name; the code is :mod:`framework.io.samples`).

Kept so that ``python -m framework.samples NAME...`` and ``from framework.samples import
locate_sample`` (configs, the README) keep working after the move into ``framework.io``.
"""

import sys

from .io.samples import SHA256 as SHA256
from .io.samples import locate_sample as locate_sample
from .io.samples import main as main
from .io.samples import search_folders as search_folders
from .io.samples import shared_folder as shared_folder

if __name__ == "__main__":
    sys.exit(main())
