"""Find SGLang launch lines in deployment files: Kubernetes manifests, Dynamo graph
deployments (YAML) and shell scripts.

Nothing is run: a shell script is tokenized with :mod:`shlex`, YAML is read with PyYAML's
safe loader (no tags that construct objects). What comes out is the argument list each
SGLang worker would get, with where it was found, for :mod:`moonpin.resolver.args.rules`.

* **Launchers** recognised: ``python -m sglang.launch_server ARGS``, ``sglang serve
  [MODEL] ARGS`` (a positional model becomes ``--model-path``; ``--model-type`` is the CLI's
  own and is dropped), ``python path/to/sglang/launch_server.py ARGS`` and Dynamo's worker
  ``python -m dynamo.sglang ARGS`` (SGLang's arguments plus Dynamo's own, which the release's
  parser reports as not its own).
* **YAML**: every mapping with ``command``/``args`` is looked at. A container (under
  ``containers``/``initContainers``, Dynamo's ``extraPodSpec.mainContainer``, or any mapping
  with an ``image``) gives its ``command`` + ``args`` (Kubernetes semantics; ``sh -c SCRIPT``
  is read as a shell script). A container with ``args`` only, no launcher and SGLang flags
  (``--model-path``, ``--elastic-ep-backend``) is taken as the image's entrypoint launching
  SGLang, and says so. SGLang arguments in a mapping that is *not* a container (e.g.
  ``spec.services.<Worker>.args`` beside ``extraPodSpec``) never reach a worker: that is a
  :class:`Finding`, and they are not validated. ``$(VAR)`` references are expanded from the
  container's ``env`` literals, as Kubernetes does, and from a Dynamo service's ``envs``.
* **Shell**: continuation lines are joined, comments dropped, commands split at ``;``,
  ``&&``, ``||``, ``|``, ``&``; ``NAME=value`` and ``export NAME=value`` are remembered;
  ``$NAME``, ``${NAME}`` and ``${NAME:-default}`` are expanded from them (and from ``env``).

A value moonpin cannot know offline (an unset variable, ``"$@"``, a Kubernetes
``valueFrom``) is kept as an :class:`Unresolved` token: rules that read it are "not checked",
never guessed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from moonpin.resolver.args.rules import Unresolved
from moonpin.resolver.args.tags import (
    cuda_of_image,
    sglang_version_in_image,
    sglang_version_of_image,
)

if TYPE_CHECKING:  # a launch on the command line reads no file (pathlib costs it ~3 ms)
    from pathlib import Path

__all__ = ["Finding", "Launch", "Unresolved", "cuda_of_image", "from_shell", "from_yaml",
           "read_file", "sglang_version_in_image", "sglang_version_of_image"]


class Launch(NamedTuple):
    argv: tuple[str, ...]  # the arguments SGLang parses (Unresolved where unknown)
    where: str  # "file:line" and, for YAML, the path of the args
    launcher: str
    image: str | None = None
    notes: tuple[str, ...] = ()


class Finding(NamedTuple):
    """A problem with the file itself (not a rule of the release)."""

    where: str
    message: str
    fix: str


class _Found:
    __slots__ = ("findings", "launches")

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.findings: list[Finding] = []


_MODULES = {"sglang.launch_server": "sglang.launch_server", "dynamo.sglang": "dynamo.sglang",
            "dynamo.sglang.main": "dynamo.sglang"}
_SGLANG_FLAGS = ("--model-path", "--elastic-ep-backend", "--model", "--tp-size", "--tp")
_SHELLS = {"sh", "bash", "dash", "zsh", "ash"}
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "|&"}


def _split_launch(tokens: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
    """(launcher, SGLang argv, notes) when ``tokens`` run SGLang, else None."""
    for i, tok in enumerate(tokens):
        base = tok.rsplit("/", 1)[-1]
        if tok == "-m" and i + 1 < len(tokens) and tokens[i + 1] in _MODULES:
            launcher = " ".join([*tokens[:i + 2]])
            return launcher, list(tokens[i + 2:]), []
        if tok.endswith("sglang/launch_server.py"):
            return " ".join(tokens[:i + 1]), list(tokens[i + 1:]), []
        if base == "sglang" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            rest = list(tokens[i + 2:])
            notes = []
            if rest and not rest[0].startswith("-"):
                rest = ["--model-path", *rest]
                notes.append("`sglang serve MODEL`: the model is --model-path")
            out: list[str] = []
            j = 0
            while j < len(rest):  # --model-type is `sglang serve`'s own option
                if rest[j] == "--model-type":
                    j += 2
                    continue
                if not rest[j].startswith("--model-type="):
                    out.append(rest[j])
                j += 1
            return " ".join(tokens[:i + 2]), out, notes
    return None


# ---------------------------------------------------------------------------- shell

_VAR = re.compile(r"\$(?:\{(\w+|@|\*)(?::?-([^}]*))?\}|(\w+|@|\*))")
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)


def _expand(token: str, env: Mapping[str, str], notes: list[str]) -> list[str]:
    """Expand ``$X``/``${X}``/``${X:-d}`` in one (already unquoted) token."""
    if "$" not in token:
        return [token]
    unknown: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2)
        if name in env:
            return env[name]
        if default is not None and name not in ("@", "*"):
            notes.append(f"${{{name}}} is not set in the file: assumed its default {default!r}")
            return default
        unknown.append(m.group(0))
        return m.group(0)

    text = _VAR.sub(sub, token)
    if unknown:
        what = ", ".join(unknown)
        if any(u in ("$@", "$*", "${@}", "${*}") for u in unknown):
            notes.append(f"{what}: the script passes on its own arguments; validate what "
                         "calls it too")
        else:
            notes.append(f"{what} is not set in the file: not known offline")
        return [Unresolved(text)]
    whole = _VAR.fullmatch(token)
    if whole and (whole.group(1) or whole.group(3)) in env:
        return text.split()  # an unquoted variable splits into words (the usual intent)
    return [text]


#: Bounds on a shell script: ``shlex`` is pure Python (~1 s per MB), and a line whose
#: quote never closes would otherwise be re-tokenized with every following line.
MAX_LINE = 64 * 1024  # characters in one logical command line
MAX_CARRY = 500  # lines a still-open quote is carried over


_SPECIAL = re.compile(r"""[#'"\\]""")
_IN_DOUBLE = re.compile(r'["\\]')


def _quote_after(line: str, state: str | None) -> str | None:
    """The quote still open at the end of ``line`` ("'", '"' or None) when ``state`` was
    open at its start, as a POSIX shell reads it (backslash escapes outside single
    quotes; ``#`` after a blank starts a comment). Linear: a regex jumps to the next
    character that matters."""
    i, n = 0, len(line)
    while i < n:
        if state is None:
            m = _SPECIAL.search(line, i)
            if m is None:
                return None
            c, i = m.group(), m.start()
            if c == "#":
                if i == 0 or line[i - 1] in " \t":
                    return None
                i += 1
            elif c == "\\":
                i += 2
            else:
                state, i = c, i + 1
        elif state == "'":
            j = line.find("'", i)
            if j < 0:
                return state
            state, i = None, j + 1
        else:
            m = _IN_DOUBLE.search(line, i)
            if m is None:
                return state
            if m.group() == "\\":
                i = m.start() + 2
            else:
                state, i = None, m.start() + 1
    return state


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each command line: continuations joined, and lines
    whose quotes are still open carried over (a quoted ``bash -c "..."`` block), for at
    most :data:`MAX_CARRY` lines or :data:`MAX_LINE` characters (then the line is given
    as it is, and tokenizing it reports the open quote)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        parts = [lines[i]]
        state = _quote_after(lines[i], None)
        size = len(lines[i])
        i += 1
        while i < len(lines) and size <= MAX_LINE and i - start < MAX_CARRY:
            last = parts[-1]
            if state is None and (len(last) - len(last.rstrip("\\"))) % 2:  # odd: `\` + newline
                parts[-1] = last[:-1]
                sep = " "
            elif state is not None:
                sep = "\n"
            else:
                break
            parts.append(sep + lines[i])
            state = _quote_after(lines[i], state)
            size += len(lines[i]) + 1
            i += 1
        yield start + 1, "".join(parts)


def _commands(line: str) -> list[list[str]]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    lex.commenters = "#"
    out: list[list[str]] = [[]]
    for tok in lex:
        if tok in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def from_shell(text: str, name: str, env: Mapping[str, str] | None = None) -> _Found:
    """The SGLang launch lines of a shell script."""
    found = _Found()
    known: dict[str, str] = dict(env or {})
    assumed: dict[str, list[str]] = {}  # variable -> how its value was assumed
    for lineno, line in _logical_lines(text):
        head = line.lstrip()
        if not head or head.startswith("#"):
            continue  # blank or a comment: nothing to tokenize
        if len(line) > MAX_LINE:
            found.findings.append(Finding(
                f"{name}:{lineno}", f"a command line of {len(line):,} characters is not "
                f"read (limit {MAX_LINE:,})", "split it, or check the file is a script"))
            continue
        try:
            commands = _commands(line)
        except ValueError as e:
            found.findings.append(Finding(f"{name}:{lineno}", f"cannot tokenize this line ({e})",
                                          "check its quotes"))
            continue
        for cmd in commands:
            words = cmd[1:] if cmd[0] in ("export", "readonly", "local", "declare") else cmd
            assigns = [m for m in (_ASSIGN.match(w) for w in words) if m]
            if assigns and len(assigns) == len(words):
                for m in assigns:
                    value_notes: list[str] = []
                    expanded = _expand(m.group(2), known, value_notes)
                    if not any(isinstance(e, Unresolved) for e in expanded):
                        known[m.group(1)] = " ".join(expanded)
                        assumed[m.group(1)] = value_notes
                continue
            notes: list[str] = []
            split = _split_launch(cmd)
            if split is None:
                # `bash -c "python -m sglang.launch_server ..."`: read the inner script.
                for i, w in enumerate(cmd[:-1]):
                    if w.rsplit("/", 1)[-1] in _SHELLS and cmd[i + 1] == "-c" and i + 2 < len(cmd):
                        inner = from_shell(cmd[i + 2], name, known)
                        for launch in inner.launches:
                            found.launches.append(Launch(
                                launch.argv, f"{name}:{lineno}", launch.launcher,
                                notes=launch.notes))
                        found.findings += inner.findings
                        break
                continue
            launcher, argv, notes = split
            out: list[str] = []
            for tok in argv:
                out += _expand(tok, known, notes)
                for var in _VAR.finditer(tok):
                    notes += assumed.get(var.group(1) or var.group(3) or "", [])
            found.launches.append(Launch(tuple(out), f"{name}:{lineno}", launcher,
                                         notes=tuple(dict.fromkeys(notes))))
    return found


# ---------------------------------------------------------------------------- YAML

_K8S_REF = re.compile(r"\$\$|\$\((\w+)\)")
_CONTAINER_LISTS = {"containers", "initContainers", "ephemeralContainers"}


class _Node(NamedTuple):
    """A YAML node with its line: str for scalars, list or dict of _Node otherwise."""

    value: Any
    line: int


#: YAML aliases share nodes: expanding them is where "billion laughs" documents explode.
MAX_NODES = 200_000
MAX_DEPTH = 100


def _convert(node: Any, budget: list[int], depth: int = 0) -> _Node:
    """Plain nodes with lines; ValueError past MAX_NODES (alias expansion) or MAX_DEPTH
    (a recursive alias)."""
    import yaml

    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise ValueError("too many nodes or too deeply nested once its aliases are expanded "
                         f"(limits: {MAX_NODES} nodes, depth {MAX_DEPTH})")
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        return _Node(node.value, line)
    if isinstance(node, yaml.SequenceNode):
        return _Node([_convert(n, budget, depth + 1) for n in node.value], line)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, _Node] = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.start_mark.line)
            out.setdefault(str(key), _convert(v, budget, depth + 1))
        return _Node(out, line)
    return _Node(None, line)


def _strings(node: _Node | None) -> list[str] | None:
    if node is None:
        return []
    if isinstance(node.value, list):
        return [v.value if isinstance(v.value, str) else "" for v in node.value]
    if isinstance(node.value, str):
        return [node.value]
    return None


def _k8s_env(container: dict[str, _Node]) -> dict[str, str]:
    """The container's ``env`` literals (``valueFrom`` ones are only known in the cluster)."""
    known: dict[str, str] = {}
    env = container.get("env")
    for item in env.value if env is not None and isinstance(env.value, list) else ():
        if not isinstance(item.value, dict) or "name" not in item.value:
            continue
        name = item.value["name"].value
        value = item.value.get("value")
        if value is not None and isinstance(value.value, str):
            known[str(name)] = value.value
    return known


def _k8s_expand(token: str, known: Mapping[str, str], notes: list[str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: a defined variable is replaced, ``$$`` escapes, an
    undefined reference stays as written (and so reaches SGLang literally)."""
    unknown: list[str] = []

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        if name in known:
            return known[name]
        unknown.append(m.group(0))
        return m.group(0)

    text = _K8S_REF.sub(sub, token)
    if unknown:
        notes.append(f"{', '.join(unknown)}: set from the cluster (valueFrom) or not at all; "
                     "not known offline")
        return Unresolved(text)
    return text


def _is_container(path: Sequence[str], mapping: dict[str, _Node]) -> bool:
    if path and path[-1] == "mainContainer":
        return True
    if len(path) >= 2 and path[-2] in _CONTAINER_LISTS:
        return True
    return "image" in mapping


def _looks_sglang(argv: Sequence[str]) -> bool:
    return any(a.split("=", 1)[0] in _SGLANG_FLAGS for a in argv)


def _path_text(path: Sequence[str]) -> str:
    out = ""
    for p in path:
        out += f"[{p[1:]}]" if p.startswith("#") else (f".{p}" if out else p)
    return out


def _fix_for_misplaced(path: Sequence[str]) -> str:
    if len(path) >= 3 and path[-3] == "services" and path[-2:][0]:
        base = _path_text(path[:-1] if path[-1] in ("args", "command") else path)
        return f"move them to {base}.extraPodSpec.mainContainer.args (Dynamo) or a container's args"
    return "move them to the worker container's args (…containers[].args)"


def _misplaced(where: str, path: Sequence[str], argv: Sequence[str]) -> Finding:
    shown = " ".join(argv)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return Finding(where, f"launch arguments outside any container ({shown}): Kubernetes and "
                   "Dynamo pass them to no worker, which starts without them",
                   _fix_for_misplaced([*path, "args"]))


def _walk(node: _Node, path: list[str], doc_image: str | None, name: str,
          found: _Found, inherited: Mapping[str, str] | None = None) -> None:
    """``inherited``: env literals a Dynamo service declares (``envs``) for its pods."""
    inherited = inherited or {}
    if isinstance(node.value, list):
        for i, item in enumerate(node.value):
            _walk(item, [*path, f"#{i}"], doc_image, name, found, inherited)
        return
    if not isinstance(node.value, dict):
        return
    m: dict[str, _Node] = node.value
    if "envs" in m:  # a Dynamo service: its envs reach the containers of its pods
        inherited = {**inherited, **_k8s_env({"env": m["envs"]})}
    if "command" in m or "args" in m:
        _look_at(m, path, name, found, inherited)
    for key, child in m.items():
        if key in ("command", "args"):
            continue
        _walk(child, [*path, key], doc_image, name, found, inherited)


def _look_at(m: dict[str, _Node], path: list[str], name: str, found: _Found,
             inherited: Mapping[str, str] | None = None) -> None:
    command, args = _strings(m.get("command")), _strings(m.get("args"))
    if command is None or args is None:
        return
    first = m.get("command") or m.get("args")
    assert first is not None
    where_path = _path_text([*path, "command" if "command" in m else "args"])
    where = f"{name}:{first.line} {where_path}"
    image_node = m.get("image")
    image = image_node.value if image_node is not None and isinstance(image_node.value,
                                                                       str) else None
    container = _is_container(path, m)
    known = {**(inherited or {}), **_k8s_env(m)} if container else {}
    notes: list[str] = []
    argv = [_k8s_expand(t, known, notes) for t in [*command, *args]]
    shell_at = next((i for i, w in enumerate(argv[:-1])
                     if w.rsplit("/", 1)[-1] in _SHELLS and argv[i + 1] == "-c"), None)
    launches: list[Launch] = []
    if shell_at is not None and shell_at + 2 < len(argv):
        inner = from_shell(argv[shell_at + 2], name, known)
        line = first.line
        launches = [Launch(la.argv, f"{name}:{line} {where_path} (sh -c)", la.launcher, image,
                           tuple(notes) + la.notes) for la in inner.launches]
        found.findings += inner.findings
    else:
        split = _split_launch(argv)
        if split is not None:
            launcher, sargv, more = split
            launches = [Launch(tuple(sargv), where, launcher, image, tuple(notes + more))]
        elif container and not command and _looks_sglang(args):
            launches = [Launch(tuple(argv), where, "the image's entrypoint (assumed to start "
                               "SGLang with these args)", image, tuple(notes))]
    if not launches:
        # Flags beside a pod template (a Dynamo service's own `args`, next to its
        # extraPodSpec) look like launch arguments that never reach the container.
        beside_pod = "extraPodSpec" in m or (len(path) >= 2 and path[-2] == "services")
        if not container and (_looks_sglang(argv) or _split_launch(argv) or (
                beside_pod and any(a.startswith("--") for a in argv))):
            found.findings.append(_misplaced(where, path, argv))
        return
    if not container:
        found.findings.append(_misplaced(where, path, argv))
        return
    found.launches += launches


_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\n]|\'\')*\'')
_BRACKET = re.compile(r"[\[\]{}]")


def _flow_depth(text: str) -> int:
    """How deep flow collections nest, counted on the brackets outside quoted scalars
    before PyYAML's recursive composer sees them (5,000 nested ``[`` exhaust its stack).
    Linear; a bracket inside a plain scalar may count, which only overestimates."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_QUOTED.sub("", text)):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def from_yaml(text: str, name: str) -> _Found:
    """The SGLang launches of every document of a YAML file (ValueError when it is not
    YAML)."""
    import yaml

    found = _Found()
    depth = _flow_depth(text)
    if depth > MAX_DEPTH:
        raise ValueError(f"{name}: YAML flow collections ([...], {{...}}) nested {depth} deep "
                         f"(limit {MAX_DEPTH})")
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{name}{at}: not valid YAML: "
                         f"{getattr(e, 'problem', None) or e}") from None
    except RecursionError:  # block nesting the pre-scan does not count (indentation)
        raise ValueError(f"{name}: YAML nested deeper than its reader can follow (limit "
                         f"{MAX_DEPTH} levels)") from None
    budget = [MAX_NODES]
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        try:
            root = _convert(doc, budget)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        prefix = [] if len(docs) == 1 else [f"doc{i + 1}"]
        _walk(root, prefix, None, name, found)
    return found


#: The largest ``args --file`` read.
MAX_FILE = 8 * 1024 * 1024


def read_file(path: Path, kind: str = "auto") -> _Found:
    """Launches in a YAML manifest or a shell script (``kind``: auto, yaml, shell).
    Raises OSError (:class:`moonpin.kb.errors.ReadRefused`: missing, unreadable, not a regular
    file, over :data:`MAX_FILE`), ValueError when the YAML does not parse or passes a
    limit."""
    from moonpin.kb.files import read_regular

    text = read_regular(path, cap=MAX_FILE, what="launch file").decode("utf-8", "replace")
    if kind == "auto":
        kind = "yaml" if path.suffix.lower() in (".yaml", ".yml") else (
            "shell" if path.suffix.lower() in (".sh", ".bash") or text.startswith("#!")
            else "yaml" if re.search(r"^[ \t]*(apiVersion|kind|spec):", text, re.M) else "shell")
    return from_yaml(text, str(path)) if kind == "yaml" else from_shell(text, str(path))


