"""``python -m moonpin``: the ``moonpin`` command."""

import sys

from moonpin.cli.main import main

__all__: list[str] = []

sys.exit(main())
