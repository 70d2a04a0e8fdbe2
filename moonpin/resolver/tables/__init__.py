"""The tables resolved when the KB is written, so queries and the worker's check start fast.

One module a family of tables: :mod:`.reading` (where they are, a table read: its stamp,
its bound, once a process), :mod:`.per_release` (each SGLang release's mooncake
combinations, requirements, launch rules, explain, fits, and the fix line read from them),
:mod:`.documents` (the KB-wide facts, summary, names, torch facts, a release's show),
:mod:`.torch_labels` (a torch label's CUDA), :mod:`.native` (the other extensions' tables:
``which <extension>``, ``explain`` of a stack) and :mod:`.writer`, which writes them all at
``kb resolve`` (it imports the full resolver). The readers need only the standard library,
as the runtime check reads them. Nothing is imported here: a reader loads only its own
module.
"""

__all__: list[str] = []
