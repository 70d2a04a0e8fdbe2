"""Reading Dockerfiles and shell scripts: an SGLang base image's tag (``FROM
lmsysorg/sglang:v0.5.18-cu130``), the version variables of
:data:`~moonpin.resolver.pins.reading.base.VERSION_VARIABLES`
(``ARG``/``ENV``/``export``/assignments) and the arguments of ``pip install`` / ``uv pip
install`` / ``python -m pip install`` lines, across ``\\`` continuations (Docker drops comment
lines inside one), ``&&``/``;`` chains and quotes (POSIX shell word rules, without expansion)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from packaging.version import Version

from moonpin.resolver.pins.reading.base import (
    DEFAULT_NOTE,
    MAX_VERSION_CHARS,
    NAME_RE,
    TRACKED,
    UNUSED_DEFAULT,
    VARIABLE_NOTE,
    VERSION_VARIABLES,
    Locate,
    Logical,
    Pin,
    PinError,
    Text,
    canon,
    pin_from_requirement,
    value_pin,
)
from moonpin.resolver.pins.reading.platforms import Stages

__all__ = ["FileArg", "IndexArg", "shell_index_options", "shell_pins"]


class FileArg(NamedTuple):
    """A ``pip install -r FILE`` / ``-c FILE`` (``uv pip install``, ``uv pip sync FILE``):
    the requirements file the line installs, as paths it may be at in the build context (a
    Dockerfile's ``COPY``/``ADD`` and ``WORKDIR`` mapped back) or beside a script, most
    likely first; for the reader to follow as an include."""

    line: int
    paths: tuple[str, ...]
    kind: str
    #: the platform of the Dockerfile stage that installs it (see ``Pin.platform``)
    platform: str | None = None
    platform_at: str = ""
    platform_tag: str = ""


class IndexArg(NamedTuple):
    """A ``pip install`` / ``uv pip install`` option that adds where packages are found:
    ``-f``/``--find-links``, ``-i``/``--index-url``, ``--extra-index-url``, uv's
    ``--index``/``--default-index`` and ``--torch-backend``, as written (``option`` in its
    long spelling), and for a find-links path the build-context paths it may be at (a
    Dockerfile's ``COPY``/``WORKDIR`` mapped back, as for :class:`FileArg`)."""

    line: int
    option: str
    value: str
    paths: tuple[str, ...] = ()


Result = Pin | PinError | FileArg | IndexArg | None
#: What :func:`shell_pins` yields (the index options are :func:`shell_index_options`').
Read = Pin | PinError | FileArg | None

#: The options of :class:`IndexArg`, in their long spelling.
_INDEX_OPTIONS = {"-f": "--find-links", "--find-links": "--find-links",
                  "-i": "--index-url", "--index-url": "--index-url",
                  "--extra-index-url": "--extra-index-url", "--index": "--index",
                  "--default-index": "--default-index", "--torch-backend": "--torch-backend"}


def shell_pins(shown: str, text: Text) -> Iterator[Read]:
    """Every version variable and ``pip install`` requirement of a tracked distribution.

    A variable is of the distribution the file installs with it (``ARG MOONCAKE_VERSION``
    used by ``pip install mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}`` is a pin
    of ``-cuda13``, and any variable so used is read, whatever its name); one the file
    uses with no install is of the distribution :data:`VERSION_VARIABLES` names."""
    logicals = list(_shell_logical_lines(text.lines))
    installs = [list(_pip_installs(shown, logical)) for logical in logicals]
    names = dict(VERSION_VARIABLES)
    used: set[str] = set()
    for res in (r for rs in installs for r in rs):
        if isinstance(res, Pin) and res.note == VARIABLE_NOTE:
            var = _variable_of(res.spec)
            if var is not None and var not in used:
                used.add(var)
                names[var] = res.name
    # An ARG with a default before the first FROM is every stage's default for an ``ARG X``
    # without one (Docker): that stage's ARG is then the global pin, already read.
    global_args: set[str] = set()
    staged = False
    out: list[Read] = []
    assigned: set[str] = set()
    docker = _Context()
    stages = Stages(shown)
    for logical, pips in zip(logicals, installs, strict=True):
        docker.see(logical.text)
        stages.see(logical.text, logical.first_line)
        pips = [docker.mapped(r) if isinstance(r, FileArg) else r for r in pips]
        if re.match(r"\s*FROM\s", logical.text, re.IGNORECASE):
            staged = True
        elif not staged and (m := re.match(r"\s*ARG\s+(\w+)\s*=", logical.text,
                                           re.IGNORECASE)):
            global_args.add(m.group(1))
        for res in _assignments(shown, logical, names, global_args if staged else set()):
            if isinstance(res, Pin) and (res.version or res.spec):
                assigned.add(re.split(r"[=\s]", res.raw, maxsplit=1)[0])
            out.append(stages.stamp(res))
        out += [stages.stamp(r) for r in pips if not isinstance(r, IndexArg)]
        out += map(stages.stamp, _base_image(shown, logical))
    for res in out:
        # the default of a variable the file gives a value is not what is installed; it
        # is still rewritten with the variable's other pins (see UNUSED_DEFAULT)
        note = res.note if isinstance(res, Pin) and res.note else ""
        if isinstance(res, Pin) and note.startswith(DEFAULT_NOTE) and (
                note[len(DEFAULT_NOTE):].strip("${}") in assigned):
            res = res._replace(note=note + UNUSED_DEFAULT)
        yield res


def shell_index_options(shown: str, text: Text) -> list[IndexArg | FileArg]:
    """The find-links folders and indexes the file's ``pip install`` lines add
    (:class:`IndexArg`), and the requirements files they install (:class:`FileArg`, whose
    own options add more), in file order; paths mapped back to the build context as
    :func:`shell_pins` maps them."""
    docker = _Context()
    out: list[IndexArg | FileArg] = []
    for logical in _shell_logical_lines(text.lines):
        docker.see(logical.text)
        for res in [*_environment_options(logical), *_pip_installs(shown, logical)]:
            if isinstance(res, FileArg):
                out.append(docker.mapped(res))
            elif isinstance(res, IndexArg):
                local = res.option == "--find-links" and "://" not in res.value
                out.append(res._replace(paths=docker.mapped(FileArg(
                    res.line, (res.value,), "requirements")).paths) if local else res)
    return out


#: The environment variables pip and uv read as an index option (pip: ``PIP_<OPTION>``, a
#: list option's values split at white space; uv: ``UV_*``, its find-links at commas), with
#: the option each stands for and how its value splits into several.
_ENV_OPTIONS = {
    "PIP_FIND_LINKS": ("--find-links", None), "PIP_INDEX_URL": ("--index-url", ""),
    "PIP_EXTRA_INDEX_URL": ("--extra-index-url", None),
    "UV_FIND_LINKS": ("--find-links", ","), "UV_INDEX_URL": ("--index-url", ""),
    "UV_EXTRA_INDEX_URL": ("--extra-index-url", None), "UV_INDEX": ("--index", None),
    "UV_DEFAULT_INDEX": ("--default-index", ""), "UV_TORCH_BACKEND": ("--torch-backend", ""),
}
_ENV_OPTION_RE = re.compile(r"(?<![\w$])(" + "|".join(_ENV_OPTIONS) + r")(=|[ \t]+(?=\S))")


def _environment_options(logical: Logical) -> Iterator[IndexArg]:
    """The index options a line sets in the environment every later ``pip install`` /
    ``uv pip install`` reads: a Dockerfile's ``ENV PIP_FIND_LINKS=/wheels`` (also its
    legacy ``ENV NAME value``), an ``ARG`` with a default (a build argument is in the
    environment of the ``RUN`` lines after it), a script's ``export`` or assignment, and a
    command's own ``PIP_INDEX_URL=… pip install``. A value naming another variable is not
    read (it is not known here)."""
    s = logical.text
    for m in _ENV_OPTION_RE.finditer(s):
        if m.group(2) == "=":
            value, _, _ = _shell_value(s, m.end())
        elif re.match(r"\s*ENV\s+$", s[:m.start()], re.IGNORECASE):
            value = s[m.end():].strip()  # legacy ``ENV NAME value``: the rest of the line
        else:
            continue
        option, sep = _ENV_OPTIONS[m.group(1)]
        if "$" in value:
            continue
        values = [value.strip()] if sep == "" else value.split(sep)
        line0, _ = logical.locate(m.start())
        yield from (IndexArg(line0, option, v.strip()) for v in values if v.strip())


def _variable_of(spec: str) -> str | None:
    """``VAR`` of a specifier that is exactly ``==${VAR}``, ``==$VAR`` or
    ``==${VAR:-default}``."""
    m = re.fullmatch(r"={2,3}\s*\$(?:\{(\w+)(?::?-[^}]*)?\}|(\w+))", spec.strip())
    return (m.group(1) or m.group(2)) if m else None


_FROM = re.compile(r"[ \t]*FROM[ \t]+(?:--\S+[ \t]+)*(\S*sglang:\S+)", re.IGNORECASE)


def _base_image(shown: str, logical: Logical) -> Iterator[Read]:
    """``FROM lmsysorg/sglang:v0.5.18-cu130``: the SGLang release the image's tag stands
    for, read as ``moonpin args --file`` reads that tag (kind ``docker-image``, its version
    the tag's, so an update rewrites the tag)."""
    m = _FROM.match(logical.text)
    if m is None or "$" in m.group(1):
        return
    from moonpin.resolver.args.tags import sglang_version_in_image

    at = sglang_version_in_image(m.group(1))
    if at is None:
        return
    line0, _ = logical.locate(m.start(1))
    vline, vcol = logical.locate(m.start(1) + at[1])
    yield value_pin("sglang", at[0], line0, vcol, shown, m.group(1), "docker-image",
                    version_line=vline, note="base image tag")


def _assignments(shown: str, logical: Logical, names: dict[str, str],
                 inherited: set[str]) -> Iterator[Read]:
    s = logical.text
    for var, name in names.items():
        for m in re.finditer(rf"(?<![\w$]){var}(=|\s+|$)", s):
            if m.group(1) != "=":
                if var not in inherited and re.fullmatch(rf"\s*ARG\s+{var}\s*", s,
                                                         re.IGNORECASE):
                    line0, _ = logical.locate(m.start())
                    vline, vcol = logical.locate(m.start() + len(var))  # `=V` goes here
                    yield value_pin(name, "", line0, vcol, shown, s.strip(), "dockerfile-arg",
                                    version_line=vline, note="build arg without default")
                    continue
                # legacy ``ENV NAME value``
                if not re.match(rf"\s*ENV\s+{var}\s+\S", s, re.IGNORECASE):
                    continue
            value, vstart, end = _shell_value(s, m.end())
            dm = re.fullmatch(rf"\$\{{{var}:?-([^}}]*)\}}", value)
            if dm:
                value, vstart = dm.group(1), vstart + dm.start(1)
            elif "$" in value:
                continue  # a reference to another variable: not a literal pin
            line0, _ = logical.locate(m.start())
            vline, vcol = logical.locate(vstart)
            raw = s[m.start():end].strip()
            yield value_pin(name, value, line0, vcol, shown, raw, "dockerfile-arg",
                            version_line=vline)


def _pip_installs(shown: str, logical: Logical) -> Iterator[Result]:
    words: list[_Word] = []
    commands: list[list[_Word]] = []
    for tok in _shell_words(logical.text):
        if tok.op:
            commands.append(words)
            words = []
        else:
            words.append(tok)
    commands.append(words)
    for cmd in commands:
        for j, w in enumerate(cmd):
            if (
                w.value in ("install", "sync")
                and j
                and re.fullmatch(r"(\S*/)?pip[\d.]*", cmd[j - 1].value)
                and all(_is_command_prefix(x.value) for x in cmd[: j - 1])
            ):
                if w.value == "install":
                    yield from _pip_args(shown, logical, cmd[j + 1:])
                else:  # uv pip sync FILE...: every file named is installed
                    yield from (FileArg(logical.locate(a.offset(0))[0], (a.value,),
                                        "requirements") for a in cmd[j + 1:]
                                if not a.value.startswith("-"))
                break


def _pip_args(shown: str, logical: Logical, args: list[_Word]) -> Iterator[Result]:
    i = 0
    while i < len(args):
        w = args[i]
        i += 1
        if w.value.startswith("-"):
            opt = w.value.split("=", 1)[0]
            file_arg = _file_option(w.value, args[i].value if i < len(args) else None)
            if file_arg is not None:
                value, kind, took = file_arg
                i += took
                line0, _ = logical.locate(w.offset(0))
                yield FileArg(line0, (value,), kind)
            elif opt in ("-e", "--editable") and "=" not in w.value and i < len(args):
                ew = args[i]
                i += 1
                yield pin_from_requirement(ew.value, _word_locator(logical, ew), shown,
                                           "pip-install", editable=True)
            elif (index := _index_option(w.value, args[i].value if i < len(args) else None)
                  ) is not None:
                option, value, took = index
                i += took
                yield IndexArg(logical.locate(w.offset(0))[0], option, value)
            elif opt in _PIP_VALUE_OPTIONS and "=" not in w.value:
                i += 1
            continue
        if "$" in w.value:
            pin = _variable_pin(shown, logical, w)
            yield pin
            if pin is not None:
                yield _default_pin(shown, logical, w, pin)
            continue
        yield pin_from_requirement(w.value, _word_locator(logical, w), shown, "pip-install")


def _variable_pin(shown: str, logical: Logical, w: _Word) -> Pin | None:
    m = NAME_RE.match(w.value)
    if not m or canon(m.group(1)) not in TRACKED:
        return None
    extras = tuple(sorted(e.strip() for e in (m.group(2) or "[]")[1:-1].split(",")
                          if e.strip()))
    spec = w.value[m.end():].split(";")[0].strip()
    line0, col0 = logical.locate(w.offset(0))
    return Pin(canon(m.group(1)), spec, None, shown, line0, -1, w.value, "pip-install",
               extras, note=VARIABLE_NOTE, name_col=col0)


def _default_pin(shown: str, logical: Logical, w: _Word, pin: Pin) -> Pin | None:
    """The default of ``name==${VAR:-default}`` (or ``${VAR-default}``): what the shell
    installs when ``VAR`` is empty or unset, an occurrence of the pin like any other (kind
    ``pip-install``; an update rewrites it too)."""
    m = re.search(r"={2,3}\s*\$\{(\w+):?-([^}]*)\}$", w.value.split(";")[0].rstrip())
    if m is None or not m.group(2).strip():
        return None
    value, at = m.group(2), m.start(2)
    try:
        if len(value) > MAX_VERSION_CHARS:
            return None
        Version(value)
    except ValueError:  # InvalidVersion, or int()'s limit on a number of 4,300+ digits
        return None
    vline, vcol = logical.locate(w.offset(at))
    if w.offset(at + len(value) - 1) != w.offset(at) + len(value) - 1:
        vcol = -1  # quoted or escaped inside: not one run of the file's text
    return Pin(pin.name, f"=={value}", value, shown, pin.line, vcol, w.value, "pip-install",
               pin.extras, note=f"{DEFAULT_NOTE}${{{m.group(1)}}}", version_line=vline,
               name_col=pin.name_col)


#: pip's and uv's options naming a requirements file, and the kind it is read as.
_FILE_OPTIONS = {"-r": "requirements", "--requirement": "requirements",
                 "-c": "constraints", "--constraint": "constraints",
                 "--override": "constraints"}


def _file_option(word: str, following: str | None) -> tuple[str, str, int] | None:
    """``(file, kind, words taken after this one)`` for ``-r FILE``, ``-rFILE``,
    ``--requirement=FILE``, ``-c FILE`` …; None for another option."""
    opt, eq, value = word.partition("=")
    if opt in _FILE_OPTIONS:
        if eq:
            return (value, _FILE_OPTIONS[opt], 0) if value else None
        return (following, _FILE_OPTIONS[opt], 1) if following else None
    if word[:2] in ("-r", "-c") and len(word) > 2 and not word.startswith("--"):
        return word[2:], _FILE_OPTIONS[word[:2]], 0
    return None


def _index_option(word: str, following: str | None) -> tuple[str, str, int] | None:
    """``(option, value, words taken after this one)`` for ``-f DIR``, ``-fDIR``,
    ``--find-links=DIR``, ``--extra-index-url URL`` …; None for another option."""
    opt, eq, value = word.partition("=")
    if opt in _INDEX_OPTIONS:
        if eq:
            return (_INDEX_OPTIONS[opt], value, 0) if value else None
        return (_INDEX_OPTIONS[opt], following, 1) if following else None
    if word[:2] in ("-f", "-i") and len(word) > 2 and not word.startswith("--"):
        return _INDEX_OPTIONS[word[:2]], word[2:], 0
    return None


class _Context:
    """What a Dockerfile has copied where, so that ``pip install -r /app/req.txt`` is read
    from the build context's ``req.txt`` (``COPY``/``ADD`` sources, ``WORKDIR``); a script
    has none, and its paths stay as written."""

    def __init__(self) -> None:
        self.workdir = "/"
        self.copies: list[tuple[list[str], str, bool]] = []  # (sources, dest, dest is a folder)

    def see(self, text: str) -> None:
        import posixpath

        m = re.match(r"\s*(WORKDIR|COPY|ADD)\s+(.*)$", text, re.IGNORECASE)
        if m is None:
            return
        rest = m.group(2).strip()
        if m.group(1).upper() == "WORKDIR":
            if "$" not in rest:
                self.workdir = posixpath.normpath(posixpath.join(self.workdir,
                                                                 rest.strip("'\"")))
            return
        words = _json_words(rest) if rest.startswith("[") else [
            w.value for w in _shell_words(rest)]
        if any(w.startswith("--from") for w in words):
            return  # from another stage or image, not the build context
        words = [w for w in words if not w.startswith("--")]
        if len(words) < 2 or any("$" in w or "://" in w for w in words):
            return
        *sources, dest = words
        folder = dest.endswith("/") or len(sources) > 1
        self.copies.append((sources, posixpath.join(self.workdir, dest), folder))

    def mapped(self, arg: FileArg) -> FileArg:
        """``arg`` with the build-context paths its image path was copied from first."""
        import posixpath

        (value,) = arg.paths
        if "$" in value or "://" in value:
            return arg._replace(paths=())
        at = posixpath.normpath(posixpath.join(self.workdir, value))
        found: list[str] = []
        for sources, dest, folder in reversed(self.copies):
            d = posixpath.normpath(dest)
            for src in sources:
                src = posixpath.normpath(src).lstrip("/")
                if at == d and not folder:
                    found.append(src)
                elif at.startswith(d.rstrip("/") + "/"):
                    rest = at[len(d.rstrip("/")) + 1:]
                    if rest == posixpath.basename(src):
                        found.append(src)  # a file copied into a folder
                    found.append(posixpath.normpath(posixpath.join(src, rest)))  # a folder's
        if not value.startswith("/"):
            found.append(posixpath.normpath(value))
        return arg._replace(paths=tuple(dict.fromkeys(found)))


def _json_words(text: str) -> list[str]:
    """The exec form ``["src", "dest"]`` of COPY/ADD; [] when it is not a list of strings."""
    import json

    try:
        words = json.loads(text)
    except ValueError:
        return []
    return [w for w in words if isinstance(w, str)] if isinstance(words, list) else []


_PREFIX_WORDS = frozenset({"RUN", "sudo", "exec", "env", "time", "command", "nohup", "uv"})


def _is_command_prefix(word: str) -> bool:
    """A word that may come before ``pip`` in a pip command (``RUN``, ``uv``,
    ``python3 -m``, ``sudo -H``, ``VAR=x``, ``--mount=...``), so ``echo pip install`` is not."""
    return (
        word in _PREFIX_WORDS
        or word.startswith("-")
        or "=" in word
        or re.fullmatch(r"(\S*/)?python[\d.]*", word) is not None
    )


# --------------------------------------------------------------------------- shell words

_PIP_VALUE_OPTIONS = frozenset({
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "-p", "--python",
    "--index-strategy", "-C", "--config-settings", "--config-setting", "--trusted-host",
    "--platform", "--python-version", "--python-platform", "--implementation", "--abi",
    "--no-binary", "--only-binary", "--progress-bar", "--src", "--upgrade-strategy",
    "--cache-dir", "--log", "--timeout", "--retries", "--torch-backend", "--index",
    "--default-index", "--override", "--build-constraint", "-b", "--resolution",
    "--prerelease", "--keyring-provider", "--link-mode", "--exclude-newer", "--proxy",
    "--cert", "--client-cert", "--global-option", "--install-option", "--report",
    "--root-user-action", "--group", "--extra", "--no-build-isolation-package",
})


class _Word(NamedTuple):
    value: str
    offsets: list[int]  # offset in the logical line of each character of value
    op: bool = False

    def offset(self, i: int) -> int:
        if i < len(self.offsets):
            return self.offsets[i]
        return (self.offsets[-1] + 1) if self.offsets else 0


def _shell_words(s: str) -> Iterator[_Word]:
    """Shell-like words with quotes removed, keeping each character's source offset."""
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "#":
            return
        if s.startswith(("&&", "||"), i):
            yield _Word(s[i : i + 2], [i, i + 1], op=True)
            i += 2
            continue
        if c in ";|&":
            yield _Word(c, [i], op=True)
            i += 1
            continue
        chars: list[str] = []
        offs: list[int] = []
        while i < n and s[i] not in " \t\r;|&":
            c = s[i]
            if c == "'":
                j = s.find("'", i + 1)
                j = n if j < 0 else j
                chars.extend(s[i + 1 : j])
                offs.extend(range(i + 1, j))
                i = j + 1
            elif c == '"':
                i += 1
                while i < n and s[i] != '"':
                    if s[i] == "\\" and i + 1 < n and s[i + 1] in '"\\$`':
                        i += 1
                    chars.append(s[i])
                    offs.append(i)
                    i += 1
                i += 1
            elif c == "\\" and i + 1 < n:
                chars.append(s[i + 1])
                offs.append(i + 1)
                i += 2
            else:
                chars.append(c)
                offs.append(i)
                i += 1
        yield _Word("".join(chars), offs)


def _word_locator(logical: Logical, word: _Word) -> Locate:
    return lambda i: logical.locate(word.offset(i))


def _shell_value(s: str, start: int) -> tuple[str, int, int]:
    """The (unquoted) value of an assignment at ``start``: value, where it starts, where the
    written value (with its quotes) ends."""
    if start < len(s) and s[start] in "'\"":
        q = s[start]
        end = s.find(q, start + 1)
        end = len(s) if end < 0 else end
        return s[start + 1 : end], start + 1, min(end + 1, len(s))
    m = re.match(r"(\$\{[^}$\s]*\}|[^\s;&|'\"])*", s[start:])
    value = m.group(0) if m else ""
    return value, start, start + len(value)


def _shell_logical_lines(lines: list[str]) -> Iterator[Logical]:
    pieces: list[tuple[str, int]] = []
    for number, line in enumerate(lines, start=1):
        if pieces and (not line.strip() or line.lstrip().startswith("#")):
            continue  # Docker drops comment (and empty) lines inside a continuation
        cont = re.search(r"\\[ \t]*$", line)
        if cont:
            pieces.append((line[: cont.start()], number))
            continue
        pieces.append((line, number))
        yield Logical("".join(p for p, _ in pieces), pieces[0][1],
                       _segs(pieces))
        pieces = []
    if pieces:
        yield Logical("".join(p for p, _ in pieces), pieces[0][1], _segs(pieces))


def _segs(pieces: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    pos = 0
    for piece, number in pieces:
        out.append((pos, number, 0))
        pos += len(piece)
    return out

