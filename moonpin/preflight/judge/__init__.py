"""The judgements, one concern each, with their fix lines.

torch, SGLang's needs and launch line, the process-group module and its build, the libraries it
maps, the compile-at-import loader."""

__all__: list[str] = []
