"""glibc's dynamic loader, modelled from the files.

Where each library is found (``ldso``), the process it builds (``ldproc``), symbol versions and
binding (``ldsym``, ``ldbind``), the CPU's hwcap folders (``ldhost``), and the native side of an
import chain (``loadchain``)."""

__all__: list[str] = []
