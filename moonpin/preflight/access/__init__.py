"""The file-system access layer every room of the check reads the target's files through.

Below every other room and importing none of them: an image's root seen from outside
(``chroot``, the one image↔host path helper), the image root a check confines its reads to,
as a value (``confined``), what a path is, in words (``kinds``), modules inside zip archives
(``zipfs``), who the worker runs as and what that user may read and list
(``identity``), and the trace of what a piece of the check read (``reads``)."""

__all__: list[str] = []
