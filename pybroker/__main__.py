"""``python3 -m pybroker ...`` is the ``pybroker`` command."""

import sys

from pybroker.cli import main

sys.exit(main())
