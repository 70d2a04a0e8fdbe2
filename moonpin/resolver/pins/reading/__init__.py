"""Reading a project's pins from requirements, pyproject.toml, Dockerfiles and shell scripts.

Each file kind has its reader; :mod:`~moonpin.resolver.pins.reading.walk` walks the files
given and their includes, :mod:`~moonpin.resolver.pins.reading.platforms` reads a Dockerfile
stage's platform and :mod:`~moonpin.resolver.pins.reading.sources` the indexes and
find-links folders the files add."""

__all__: list[str] = []
