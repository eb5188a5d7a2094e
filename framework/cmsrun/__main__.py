"""``python -m framework.cmsrun CONFIG ...``: the same as the ``cmsrun`` command."""

import sys

from framework.cmsrun import main

sys.exit(main())
