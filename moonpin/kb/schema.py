"""The knowledge base's schema version, in one place: the one it writes and those it reads.

Bumped whenever a stored field changes meaning or shape. A file with a higher number was
written by a newer moonpin; a lower one must be rescraped, unless it is in
:data:`READABLE_SCHEMAS` (the later schema only added optional fields).

* 2: LaunchFlag.path (flags declared outside server_args.py, SGLang 0.5.19+).
* 3: Artifact.path (relative to the index's files) replaces Artifact.url, so no index host
  is written into the file; ScrapeInfo.index_url is None for the default index; what the
  refresh read (ScrapeInfo.read/kept/seconds/requests). Older files are converted at load
  (see ``KnowledgeBase._from_older_schema``).
* 4: KnowledgeBase.native (nixl, sglang-kernel, DeepEP, FlashInfer wheels: loader rules and
  builds); Unread.kind "native". Only added fields: schema 1-3 files read as before.
* 5: SglangRelease.launch_backends (what each choice of ``--moe-a2a-backend`` and
  ``--elastic-ep-backend`` imports, from the release's sources) and
  SglangRelease.extension_pins (its Requires-Dist lines naming a native extension). Only
  added fields: a schema 4 file reads as before, without those facts, until its next refresh
  (the SGLang extractor's fingerprint changed, so that refresh re-reads every release).
* 6: LaunchBackend.guarded / unread (the imports a release runs under a test on a backend
  option's value, :mod:`moonpin.readers.launch.guarded`); ``--elastic-ep-backend`` keeps no
  module per choice (``member`` None). Only added fields: a schema 5 file reads as before.

Nothing imported: the runtime check reads it without loading pydantic
(:mod:`moonpin.kb.models`, :mod:`moonpin.kb.store` and the check's own reading of the file,
:class:`moonpin.preflight.installed.image_facts.KBView`, all take it from here).
"""

__all__ = ["READABLE_SCHEMAS", "SCHEMA_VERSION"]

SCHEMA_VERSION = 6
READABLE_SCHEMAS = frozenset({1, 2, 3, 4, 5, 6})
