"""The tables resolved when the KB is written, so queries and the worker's check start fast.

One module a family of tables: :mod:`.writer` writes them all at ``kb resolve`` (it imports
the full resolver); the readers need only the standard library, as the runtime check reads
them. Nothing is imported here: a reader loads only its own module.
"""

__all__: list[str] = []
