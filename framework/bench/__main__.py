"""``python -m framework.bench``: see :mod:`framework.bench._cli`."""

import sys

from ._cli import main

sys.exit(main())
