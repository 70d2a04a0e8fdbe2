"""Fix lines for ``moonpin check``: a pip command that, pasted into the image's shell, gets
from what is installed to a set that loads.

pip leaves an installed requirement alone when it is already satisfied: ``==2.13.0`` is met
by ``2.13.0+cpu`` (a local label does not count against a bare version) and a reinstall of
the installed release does nothing. And the distributions of a project whose rule says its
own lines (:class:`Project`: mooncake's ``-cuda13``, ``-cpu`` and plain wheels) share one
package folder, so uninstalling one removes files of the other. So a line

* reinstalls the installed release with ``--force-reinstall --no-deps``;
* uninstalls torch first when the installed torch is the same release with a local label
  (``+cpu``) and the line wants the package index's build;
* uninstalls every installed distribution of that project before it installs another one;
* says when the release it proposes compiles at first import, and how to compile it once
  at image build.

The project is handed in as a value (its rule's data, :mod:`moonpin.preflight.extensions.
seam`): nothing here names one.

Only ``os`` and ``sys`` at import: this runs at worker start.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from moonpin.preflight.installed.image_facts import Dist
    from moonpin.resolver.answers import Candidate

    FixProvider = Callable[[str, str, str, str], list[str]]

__all__ = ["Fixer", "Project", "kb_release_line", "pip_line", "shell_line", "torch_req"]


class Project:
    """The project whose install lines a :class:`Fixer` writes beside torch's, as its loader
    rule says it (``OWN_LINES``: :mod:`moonpin.preflight.extensions.seam`): its import
    ``name`` (``mooncake``), the ``prefix`` its distributions' names start with, and
    ``prebuild``: how a release of it that compiles at first import is compiled once, at
    image build."""

    __slots__ = ("name", "prebuild", "prefix")

    def __init__(self, name: str, prefix: str, prebuild: str) -> None:
        self.name = name
        self.prefix = prefix
        self.prebuild = prebuild


def _public(version: str) -> str:
    return version.partition("+")[0]


def torch_req(version: str) -> str:
    """``torch==V`` as a fix line writes it: with ``!=V+cpu`` beside a public ``V``
    (:func:`moonpin.kb.distributions.torch_requirement`, the one spelling)."""
    from moonpin.kb.distributions import torch_requirement

    return torch_requirement(version)


def pip_line(specs: Sequence[str], *, torch: str | None, owned: Sequence[tuple[str, str]],
             prefix: str) -> str:
    """The pip command that installs exactly ``specs`` (``name==version``) over an image
    holding ``torch`` (its installed version, as pip sees it) and ``owned``, the installed
    distributions ((name, version) each) of the project whose names start with ``prefix``,
    which share one package folder."""
    names = {s.partition("==")[0] for s in specs}
    uninstall: list[str] = []
    if (any(n.startswith(prefix) for n in names) and any(
            n not in names for n, _ in owned)) or len(owned) > 1:
        uninstall += [n for n, _ in owned]  # their files overlap: all of them go
    wanted_torch = next((s.partition("==")[2] for s in specs if s.startswith("torch==")), None)
    if (wanted_torch and torch and "+" in torch and "+" not in wanted_torch
            and _public(torch) == wanted_torch):
        uninstall.append("torch")  # ==X is met by X+cpu: pip would keep it
    installed = {f"{n}=={v}" for n, v in owned}
    if torch:
        installed |= {f"torch=={torch}", f"torch=={_public(torch)}"}
    force = not uninstall and all(s in installed for s in specs)
    head = f"pip uninstall -y {' '.join(uninstall)} && " if uninstall else ""
    return (head + "pip install " + ("--force-reinstall --no-deps " if force else "")
            + " ".join(f"'{torch_req(s[7:]) if s.startswith('torch==') else s}'"
                       for s in specs))


def kb_release_line(kb_path: str, what: str, *, sglang: str | None, torch: str, python: str,
                    arch: str, pin: tuple[str, str] | None = None,
                    installed: Sequence[tuple[str, str]] = (),
                    present: Mapping[str, str] | None = None,
                    pip_only: bool = False) -> tuple[str, str | None] | None:
    """(the line, the requirement it installs) that installs the release of ``what``'s
    project (a distribution's name, its loader rule's first) the resolved tables of the KB
    at ``kb_path`` say fits this environment
    (:func:`moonpin.resolver.tables.native.fitting`: its SGLang, torch label, ``python``
    tag and ``arch``): the best that fits (``which``'s recommendation), SGLang's ``pin``
    (distribution, version) when the tables agree that it fits. The distributions of
    ``installed`` (the project's, sharing its package folder) other than the one named are
    uninstalled first; the exact releases it requires that ``present`` (name -> version as
    installed) does not hold are said. When nothing fits at this torch: the other torch the
    installed SGLang admits and the release that fits it, else said plainly, with no
    requirement (``pip_only``: None then). None when the tables do not hold the question
    (the caller says its own line) or one of ``installed`` fits (the failure is not the
    release's). Read on a failing path only."""
    from moonpin.resolver.tables.native import fitting, release_pins

    try:
        got = fitting(kb_path, what, sglang=sglang, torch=torch, python=python, arch=arch)
    except (OSError, ValueError):  # a table that went away or broke since the index read
        return None
    if got is None or any(c.dist is not None and (c.dist, c.version) in installed
                          for c in got.fits):
        return None
    cuda = f" (CUDA {got.cuda})" if got.cuda is not None else ""
    on = (f"sglang {sglang}, " if sglang else "") + f"torch {got.torch}{cuda}, {python} {arch}"
    project = got.query.get("project", what)

    def install(best: Candidate, extra: Sequence[str] = ()) -> str:
        out = [n for n, _ in installed if n != best.dist]
        head = f"pip uninstall -y {' '.join(out)} && " if out else ""
        return head + "pip install " + " ".join(
            f"'{s}'" for s in (*extra, best.requirement or f"{best.dist}=={best.version}"))

    def brings(best: Candidate) -> str:
        pins = release_pins(kb_path, best.dist, best.version) if best.dist else None
        new = sorted((d, v) for d, v in (pins or {}).items()
                     if _public((present or {}).get(d, "")) != v)
        return (f"; it installs {', '.join(f'{d} {v}' for d, v in new)} with it (its exact "
                "requirements)") if new else ""

    if got.fits:
        best = next((c for c in got.fits if pin is not None and (c.dist, c.version) == pin),
                    got.fits[0])
        why = ("the installed SGLang's pin; the knowledge base agrees: it fits "
               if pin is not None and (best.dist, best.version) == pin else
               "the knowledge base's newest release that fits ")
        return f"{install(best)} ({why}{on}{brings(best)})", best.requirement
    mine = [c for c in got.excluded if c.dist in (what, *(d for d, _ in installed))]
    newest = next((c for c in mine if not (c.reason or "").startswith("installable:")),
                  mine[0] if mine else got.excluded[0] if got.excluded else None)
    said = (f"no release of {project} the knowledge base records fits {on}" + (
        f" (newest: {newest.dist} {newest.version}: {newest.reason})" if newest else ""))
    if got.elsewhere:
        torch_to, best = got.elsewhere[0]
        return (f"{install(best, (torch_req(torch_to),))} ({said}; sglang {sglang} admits "
                f"torch {torch_to}, which {best.dist} {best.version} fits{brings(best)})",
                best.requirement)
    if pip_only:
        return None
    return (f"{said}: `moonpin which {what}" + (f" --sglang {sglang}" if sglang else "")
            + f" --torch {got.torch} --why` says why each"), None


def shell_line(fix: str, pip: str = "pip") -> str:
    """A fix line that runs pip, as a line to paste into a shell: each ``pip install`` /
    ``pip uninstall`` run by ``pip`` (``/opt/venv/bin/python -m pip``: the target's own
    interpreter, not whatever ``pip`` is first on PATH), steps joined with ``&&``, and the
    note after the command a shell comment (in parentheses it is a syntax error when
    pasted). Any other fix as it is."""
    import re

    if not fix.startswith("pip "):
        return fix
    head, note = fix, ""
    at = fix.find("' (")
    if at >= 0 and fix.endswith(")"):
        head, note = fix[:at + 1], fix[at + 3:-1]
    head = head.replace("; then pip ", " && pip ")
    head = re.sub(r"(^|&& )pip (install|uninstall) ", lambda m: f"{m[1]}{pip} {m[2]} ", head)
    return head + (f"  # {note}" if note else "")


class Fixer:
    """Fix lines for one image: what is installed, and where fitting releases of ``project``
    come from (the resolved tables of the KB at ``kb_path``, or a ``provider``)."""

    def __init__(self, provider: FixProvider | None, kb_path: str | None,
                 project: Project) -> None:
        self.provider = provider
        self.kb_path = kb_path
        self.project = project
        self.sglang: str | None = None
        #: torch's version as pip sees it (its distribution metadata)
        self.torch: str | None = None
        #: what ``torch/version.py`` says when it names another release than the metadata
        #: (the files were replaced in place): putting the distribution back is the repair
        self.torch_label: str | None = None
        #: whether the installed torch is a build without CUDA (``+cpu``)
        self.torch_cpu = False
        #: the installed distributions of :attr:`project` (name, version)
        self.owned: list[tuple[str, str]] = []
        self.python = f"cp{sys.version_info.major}{sys.version_info.minor}"  # the target's
        self.arch = os.uname().machine
        self._line: str | None = None

    def installed(self, dists: Mapping[str, Dist], owned: Sequence[Dist]) -> None:
        """Learn what is installed (``dists`` by name, and the project's ``owned``), which
        the fix lines are written over."""
        sglang, torch = dists.get("sglang"), dists.get("torch")
        self.sglang = sglang.version if sglang else None
        self.torch = torch.version if torch else None
        self.owned = [(d.name, d.version) for d in owned]

    def pip(self, specs: Sequence[str], note: str | None = None) -> str:
        line = pip_line(specs, torch=self.torch, owned=self.owned, prefix=self.project.prefix)
        return f"{line} ({note})" if note else line

    def _fits(self, sglang: str, torch: str) -> list[tuple[str, str | None]]:
        """Fitting requirements of the project (the resolved tables' fix lines) with their
        notes, prebuilt first."""
        if self.provider is not None:
            return [(r, None) for r in self.provider(sglang, torch, self.python, self.arch)]
        from moonpin.resolver.tables.per_release import fixes_for

        if self.kb_path is not None:
            return fixes_for(sglang, torch, self.python, self.arch, kb_path=self.kb_path)
        return fixes_for(sglang, torch, self.python, self.arch)

    def _with(self, specs: list[str], fit: tuple[str, str | None], why: str = "") -> str:
        req, note = fit
        notes = [why] if why else []
        if note:
            notes.append(f"note: {note}; {self.project.prebuild}")
        return self.pip([*specs, req], "; ".join(notes) or None)

    def torch_reinstall(self) -> str | None:
        """Put torch's files back as its distribution ships them, when ``torch/version.py``
        and the distribution metadata disagree (pip's ``==`` is met by the metadata, so only
        a forced reinstall rewrites them); None when they agree."""
        if self.torch_label is None or self.torch is None:
            return None
        return f"pip install --force-reinstall --no-deps '{torch_req(self.torch)}'"

    def reinstall_owner(self, top: str, owner: tuple[str, str] | None) -> str:
        """Put back the files of the distribution that provides the top-level package
        ``top`` (``owner``: its name and version as installed, when known)."""
        if top == "torch" and self.torch:
            return self.torch_files()
        if top == self.project.name and self.owned:
            return self.reinstall()
        if owner is not None:
            return f"pip install --force-reinstall --no-deps '{owner[0]}=={owner[1]}'"
        return (f"reinstall the distribution that provides {top} (`pip show -f` names it), "
                "with --force-reinstall --no-deps")

    def torch_files(self, deps: bool = False) -> str:
        """Put the installed torch release's files back as its wheel has them (``deps``:
        and those of the packages it requires, the CUDA libraries)."""
        version = self.torch or "<torch version>"
        return (f"pip install --force-reinstall {'' if deps else '--no-deps '}"
                f"'{torch_req(version)}'")

    def generic(self) -> str:
        s = self.sglang or "<sglang version>"
        t = self.torch or "<torch version>"
        return f"run `moonpin which {self.project.name} --sglang {s} --torch {t}`"

    def reinstall(self) -> str:
        """Put the project's installed release's files back as its wheel has them."""
        if len(self.owned) == 1:
            name, version = self.owned[0]
            return self.pip([f"{name}=={version}"])
        return self.line()

    def line(self) -> str:
        """Install the project's release that fits the installed SGLang and torch (or move torch or
        SGLang when none does)."""
        if self._line is not None:
            return self._line
        text = self.generic()
        if self.sglang and self.torch:
            try:
                fits = self._fits(self.sglang, self.torch)
            except ImportError:
                fits = []
            except Exception as e:  # someone else's code must not crash the check
                fits = []
                text += f" (resolver failed: {type(e).__name__}: {e})"
            if fits:
                text = self._with([], fits[0])
            elif self.provider is None:
                try:
                    moved = self._torch_move() or self._sglang_move()
                except ImportError:  # packaging absent (moonpin put on PYTHONPATH by hand)
                    moved = None
                if moved:
                    text = moved
        self._line = text
        return text

    def torch_fix(self, wanted: str | None, spec: str) -> str:
        """Install the torch SGLang pins (``wanted``, from ``torch==X``) and a project release that
        fits it."""
        if wanted is None or not self.sglang:
            return f"pip install '{spec}' (the torch this SGLang release is built for)"
        try:
            fits = self._fits(self.sglang, wanted)
        except Exception:  # someone else's code must not crash the check
            fits = []
        if fits:
            return self._with([f"torch=={wanted}"], fits[0])
        return self.pip([f"torch=={wanted}"])

    def cuda_torch(self) -> str:
        """Replace a torch without CUDA by the package index's build of the same release."""
        version = _public(self.torch or "<torch version>")
        return self.pip([f"torch=={version}"], "the package index's Linux wheel of torch "
                        f"{version} is its CUDA build; a +cpu wheel a --find-links folder or "
                        "an extra index offers is excluded")

    def _torch_move(self) -> str | None:
        """No release of the project fits this torch: the torch the SGLang release requires,
        and the one that fits it, when the resolved tables know one."""
        from moonpin.kb.paths import default_kb_file
        from moonpin.resolver.tables import per_release

        kb_path = self.kb_path or default_kb_file()
        if not self.sglang or not self.torch or per_release.load_requirements(kb_path) is None:
            return None
        table = per_release.load(kb_path, self.sglang)
        if table is None:
            return None
        for required in table.sglang[self.sglang]["torch"]:
            if required == _public(self.torch):
                continue
            fits = per_release.fixes_for(self.sglang, required, self.python, self.arch,
                                      kb_path=kb_path)
            if fits:
                return self._with([f"torch=={required}"], fits[0],
                                  f"sglang {self.sglang} requires torch {required}; no "
                                  f"{self.project.name} fits torch {self.torch}")
        return None

    def _sglang_move(self) -> str | None:
        """No release of the project fits this SGLang release, whatever its torch: the nearest
        SGLang release (newer first) that requires the installed torch and has one that fits."""
        from packaging.version import Version

        from moonpin.kb.paths import default_kb_file
        from moonpin.resolver.tables import per_release

        kb_path = self.kb_path or default_kb_file()
        reqs = per_release.load_requirements(kb_path)
        if not self.sglang or not self.torch or reqs is None:
            return None
        torch = _public(self.torch)
        try:
            here = Version(self.sglang)
            cands = [(Version(v), v) for v, r in reqs.items()
                     if torch in (r.get("torch") or ()) and v != self.sglang]
        except ValueError:  # InvalidVersion, or a number past int()'s 4,300 digits
            return None
        cands = [c for c in cands if not c[0].is_prerelease]
        newer = sorted(c for c in cands if c[0] > here)
        older = sorted((c for c in cands if c[0] < here), reverse=True)
        for _, v in (newer + older)[:12]:
            fits = per_release.fixes_for(v, torch, self.python, self.arch, kb_path=kb_path)
            if fits:
                return self._with([f"sglang=={v}"], fits[0],
                                  f"no {self.project.name} fits sglang {self.sglang} with torch "
                                  f"{self.torch}; sglang {v} requires this torch and has one")
        return None
