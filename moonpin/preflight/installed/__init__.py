"""What is installed in the target, read from its files.

The distributions' METADATA and RECORD, torch's label and CUDA, SGLang's sources and launch
rules, a build's facts, and where each was found."""

__all__: list[str] = []
