"""``python -m moonpin.preflight``: the worker-start check, the leanest way in.

A worker start is short and leaves little cyclic garbage, so the cyclic collector is off (its
passes over the objects that the imports and the memos create cost ~1-2 ms), and the process
ends with ``os._exit`` once stdout and stderr are flushed: tearing the interpreter down
(every module and memo freed one by one) costs ~2-4 ms more and does nothing the system does
not. Not when something still needs the ordinary exit: an ``atexit`` handler, a thread, or
stdio that cannot be flushed (a closed pipe, said as Python says it). A start whose answer is
remembered and still holds prints it without loading the check
(:mod:`moonpin.preflight.verdict`).
"""

import gc
import os
import sys

gc.disable()

# Before any module of moonpin imports what a file ahead of the standard library would
# replace (a `json.py` on PYTHONPATH): named, exit 2, instead of whatever it would raise.
from moonpin.guard import refused as _refused  # noqa: E402

if _refused():
    raise SystemExit(2)

from moonpin.preflight.verdict import main  # noqa: E402  (after the collector is off)

__all__: list[str] = []


def _leave(rc: int) -> None:
    import atexit

    try:
        if sys.stdout is not None:  # None: descriptor 1 closed (nothing was printed)
            try:
                sys.stdout.flush()
            except BrokenPipeError:  # the reader left (`| head`): the verdict's code holds
                from moonpin.kb.files import to_devnull

                to_devnull(1)
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):  # a stream that cannot be written: the ordinary exit says so
        sys.exit(rc)
    threading = sys.modules.get("threading")
    count = getattr(atexit, "_ncallbacks", None)  # CPython's; elsewhere: the ordinary exit
    if (count is None or count() or (threading is not None and threading.active_count() > 1)):
        sys.exit(rc)
    os._exit(rc)


_leave(main(sys.argv[1:]))
