"""``python -m moonpin.resolver.check``: the worker-start check, the leanest way in."""

import sys

from moonpin.resolver.check.run import main

__all__: list[str] = []

sys.exit(main())
