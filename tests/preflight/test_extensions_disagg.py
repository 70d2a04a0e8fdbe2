"""PD disaggregation and HiCache with nixl (issue 39): ``--disaggregation-transfer-backend``
and ``--hicache-storage-backend`` choices read from SGLang's own sources (a package per
choice; a registry of modules), and the ``nixl`` package they import judged by its loader
rule: the meta's CUDA dispatch to ``nixl_cu<major>``, then the backend's compiled modules
through the ld.so model. Each class of fault on a throwaway image against the same image
without it; each test fails on the code before this change (the options were judged only
for mooncake: nixl absent or broken was "usable")."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from moonpin.readers.launch.choice_modules import member_of, package_members, registered
from tests.lib.checkrun import run
from tests.lib.extimages import gcc_so, nixl_meta, torch_image
from tests.lib.images import add_dist, ext_suffix

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

DISAGG = ("--", "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl")
HICACHE = ("--", "--enable-hierarchical-cache", "--hicache-storage-backend", "nixl")

#: nixl 1.5.1's meta ``nixl/__init__.py``, in the shape the rule reads
_META = nixl_meta("nixl_cu", load="_load_cuda_backend",
                  fallback=("nixl_cu13", "nixl_cu12", "nixl_rocm"), skipped="ModuleNotFoundError",
                  none="No NIXL backend found (tried nixl_cu13, nixl_cu12, nixl_rocm)",
                  subs=("_bindings", "_utils", "logging", "_api"))

_CONN = '''try:
    from nixl._bindings import nixlBackendError
except ImportError:
    nixlBackendError = None


class NixlKVManager:
    def __init__(self):
        from nixl._api import nixl_agent
        self.agent = nixl_agent
'''

_HICACHE = '''try:
    from nixl._api import nixl_agent
except ImportError as e:
    raise ImportError("Please install NIXL") from e
'''

_FACTORY = '''class StorageBackendFactory:
    @classmethod
    def register_backend(cls, name, module_path, class_name):
        pass


StorageBackendFactory.register_backend(
    "file", "sglang.srt.mem_cache.hicache_storage", "HiCacheFile"
)
StorageBackendFactory.register_backend(
    "nixl",
    "sglang.srt.mem_cache.storage.nixl.hicache_nixl",
    "HiCacheNixl",
)
'''


def _sglang_sources(site: Path) -> None:
    """SGLang 0.5.23's modules for the two options, in their shapes."""
    srt = site / "sglang" / "srt"
    (srt / "disaggregation" / "nixl").mkdir(parents=True)
    (srt / "disaggregation" / "nixl" / "__init__.py").write_text(
        "from sglang.srt.disaggregation.nixl.conn import NixlKVManager\n")
    (srt / "disaggregation" / "nixl" / "conn.py").write_text(_CONN)
    (srt / "disaggregation" / "fake").mkdir()
    (srt / "disaggregation" / "fake" / "__init__.py").write_text("import os\n")
    storage = srt / "mem_cache" / "storage"
    (storage / "nixl").mkdir(parents=True)
    (storage / "backend_factory.py").write_text(_FACTORY)
    (storage / "nixl" / "hicache_nixl.py").write_text(_HICACHE)
    (srt / "mem_cache" / "hicache_storage.py").write_text("import os\n")


def add_nixl_agent(site: Path, cuda: int = 13, bindings: str | None = None) -> None:
    """The meta ``nixl`` 1.5.1 and ``nixl-cu<cuda>`` 1.5.1 as the real wheels lay them out:
    ``nixl_cu13/_bindings<suffix>`` links ``libnixl.so`` of ``.nixl_cu13.mesonpy.libs``
    (RPATH), which links ``libgrpc-x.so`` of ``nixl_cu13.libs``; ``bindings``: the suffix
    of its ``_bindings`` (another Python's)."""
    (site / "nixl").mkdir()
    (site / "nixl" / "__init__.py").write_text(_META)
    (site / "nixl_meta_utils.py").write_text("def detect_cuda_major():\n    return None\n")
    add_dist(site, "nixl", "1.5.1", requires=[f"nixl-cu{cuda}==1.5.1"],
             files=["nixl/__init__.py", "nixl_meta_utils.py"])
    back = site / f"nixl_cu{cuda}"
    back.mkdir()
    (back / "__init__.py").write_text("from ._api import nixl_agent\n")
    (back / "_api.py").write_text("from . import _bindings as nixlBind\n"
                                  "from .logging import get_logger\n\n\n"
                                  "class nixl_agent:\n    pass\n")
    (back / "logging.py").write_text("import logging\n\n\ndef get_logger():\n"
                                     "    return logging.getLogger()\n")
    libs, meson = site / f"nixl_cu{cuda}.libs", site / f".nixl_cu{cuda}.mesonpy.libs"
    gcc_so(libs / "libgrpc-x.so", defines=["grpc_init"], soname="libgrpc-x.so")
    gcc_so(meson / "libnixl.so", defines=["nixl_create"], uses=["grpc_init"],
           needs=["libgrpc-x.so"], link=libs, soname="libnixl.so",
           rpath=f"$ORIGIN/../nixl_cu{cuda}.libs")
    gcc_so(back / f"_bindings{bindings or ext_suffix()}", uses=["nixl_create"],
           needs=["libnixl.so"], link=meson,
           rpath=f"$ORIGIN/../.nixl_cu{cuda}.mesonpy.libs:$ORIGIN/../nixl_cu{cuda}.libs")
    gcc_so(back / f"_utils{ext_suffix()}")
    add_dist(site, f"nixl-cu{cuda}", "1.5.1", requires=["numpy"],
             files=[f"nixl_cu{cuda}/__init__.py", f"nixl_cu{cuda}.libs/libgrpc-x.so",
                    f".nixl_cu{cuda}.mesonpy.libs/libnixl.so"])


def _site(tmp_path: Path) -> Path:
    site = torch_image(tmp_path / "site")
    _sglang_sources(site)
    return site


# -- the reader: where SGLang keeps what a choice imports ---------------------------------

def test_a_package_per_choice_is_its_modules() -> None:
    names = ["sglang/srt/disaggregation/nixl/__init__.py",
             "sglang/srt/disaggregation/nixl/conn.py",
             "sglang/srt/disaggregation/nixl/sub/deep.py",
             "sglang/srt/disaggregation/utils.py",
             "sglang/srt/disaggregation/nixlx/__init__.py"]
    assert package_members(names, "nixl", "sglang/srt/disaggregation/") == names[:2]
    assert package_members(names, "mooncake", "sglang/srt/disaggregation/") == []
    for bad in ("", "none", "../nixl", ".hidden"):
        assert package_members(names, bad, "sglang/srt/disaggregation/") == []
    # a folder without __init__.py is no package the choice imports
    assert package_members(names[1:2], "nixl", "sglang/srt/disaggregation/") == []


def test_a_registry_maps_each_choice_to_its_module() -> None:
    got = registered(_FACTORY.encode(), "register_backend")
    assert got == {"file": "sglang.srt.mem_cache.hicache_storage",
                   "nixl": "sglang.srt.mem_cache.storage.nixl.hicache_nixl"}
    # a computed argument, a call inside a function, a later call of the same choice
    src = (b"R.register_backend(NAME, 'a.b')\n"
           b"def f():\n    R.register_backend('x', 'a.x')\n"
           b"register_backend('y', 'a.y1')\nregister_backend('y', 'a.y2')\n")
    assert registered(src, "register_backend") == {"y": "a.y2"}
    # a registry that does not parse registers what is not known, not nothing
    assert registered(b"def (:\n", "register_backend") is None
    assert registered(b"import os\n", "register_backend") == {}
    assert member_of("a.b.c") == ("a/b/c/__init__.py", "a/b/c.py")


# -- the check --------------------------------------------------------------------------

@pytest.mark.parametrize("args", [DISAGG, HICACHE], ids=["disagg", "hicache"])
def test_nixl_loads_its_bindings_through_the_meta(tmp_path: Path,
                                                  args: tuple[str, ...]) -> None:
    site = _site(tmp_path)
    add_nixl_agent(site)
    r = run(site, *args, ep=False)
    assert r.rc == 0, r.out
    line = r.line("nixl")
    assert line.startswith("pass  nixl: nixl 1.5.1 at "), r.out
    assert f"loads nixl_cu13/_bindings{ext_suffix()}, nixl_cu13/_utils{ext_suffix()}" in line
    assert "nixl picks nixl_cu13 for torch's CUDA 13" in line


@pytest.mark.parametrize(("args", "why"), [
    (DISAGG, "--disaggregation-transfer-backend nixl: sglang/srt/disaggregation/nixl/"
             "conn.py:2 imports nixl._bindings"),
    (HICACHE, "--hicache-storage-backend nixl: sglang/srt/mem_cache/storage/nixl/"
              "hicache_nixl.py:2 imports nixl._api"),
], ids=["disagg", "hicache"])
def test_nixl_requested_and_absent_is_not_usable(tmp_path: Path, args: tuple[str, ...],
                                                 why: str) -> None:
    site = _site(tmp_path)
    r = run(site, *args, ep=False)
    assert r.rc == 1, r.out
    assert r.line("nixl").startswith(f"fail  nixl: not installed ({why}): `import nixl` "
                                     "fails with ModuleNotFoundError"), r.out
    assert r.fixes() and r.fixes()[0].startswith("fix: pip install 'nixl"), r.out
    # controls: a choice whose modules import no package outside SGLang asks nothing of
    # nixl; mooncake's is said in mooncake's own lines (its rule's ``CHOICES``), not here
    ok = run(site, "--", "--disaggregation-transfer-backend", "fake",
             "--hicache-storage-backend", "file", ep=False)
    assert ok.rc == 0 and "nothing to check" in ok.out, ok.out
    own = run(site, "--", "--disaggregation-transfer-backend", "mooncake", ep=False)
    assert "  nixl: " not in own.out and "mooncake installed" in own.out, own.out


def test_the_meta_without_its_cuda_backend_raises_as_it_does(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_nixl_agent(site)
    shutil.rmtree(site / "nixl_cu13")
    shutil.rmtree(next(site.glob("nixl_cu13-*.dist-info")))
    r = run(site, *DISAGG, ep=False)
    assert r.rc == 1, r.out
    assert ("`import nixl` fails: its loader raises ImportError: detected CUDA 13 but "
            "nixl-cu13 is not installed") in r.line("nixl"), r.out
    assert r.fixes()[0] == "fix: pip install 'nixl-cu13==1.5.1'", r.out


def test_bindings_built_for_another_python_fail_with_the_reinstall(tmp_path: Path) -> None:
    other = ".cpython-39-x86_64-linux-gnu.so" if "-39-" not in ext_suffix() else \
        ".cpython-312-x86_64-linux-gnu.so"
    site = _site(tmp_path)
    add_nixl_agent(site, bindings=other)
    r = run(site, *DISAGG, ep=False)
    assert r.rc == 1, r.out
    line = r.line("nixl")
    assert ("its loader raises ImportError: cannot import name '_bindings' from 'nixl_cu13' "
            f"(nixl_cu13/_api.py:1) (_bindings{other} is there: built for another Python"
            ) in line, r.out
    assert r.fixes()[0] == "fix: pip install --force-reinstall --no-deps 'nixl-cu13==1.5.1'"


def test_a_library_the_bindings_link_gone_fails_with_its_owner(tmp_path: Path) -> None:
    site = _site(tmp_path)
    add_nixl_agent(site)
    (site / "nixl_cu13.libs" / "libgrpc-x.so").unlink()
    r = run(site, *HICACHE, ep=False)
    assert r.rc == 1, r.out
    line = r.line("nixl")
    assert "libgrpc-x.so (needed by libnixl.so) cannot be found" in line, r.out
    assert "which nixl-cu13 1.5.1's RECORD lists" in line, r.out
    assert r.fixes()[0] == "fix: pip install --force-reinstall --no-deps 'nixl-cu13==1.5.1'"


def test_a_release_without_the_registry_falls_back_to_the_rules_choices(
        tmp_path: Path) -> None:
    """SGLang 0.5.1 has ``--hicache-storage-backend nixl`` but no ``backend_factory.py``
    (its ``cache_controller.py`` imports HiCache's nixl module under a test on a parameter):
    the rule's own ``CHOICES`` say the choice imports nixl, and the line says so."""
    site = _site(tmp_path)
    (site / "sglang" / "srt" / "mem_cache" / "storage" / "backend_factory.py").unlink()
    r = run(site, *HICACHE, ep=False)
    assert r.rc == 1, r.out
    assert r.line("nixl").startswith(
        "fail  nixl: not installed (--hicache-storage-backend nixl (this check's reading: the "
        "installed SGLang keeps no module of it where this check reads))"), r.out


# -- hostile sources: what a choice imports cannot be read ------------------------------

#: a file a hostile image puts where SGLang's module is: what it is, and how it is made
_HOSTILE = {
    "fifo": ("is a FIFO (named pipe), not a regular file", lambda p: os.mkfifo(p)),
    "device": ("is a character device, not a regular file",
               lambda p: p.symlink_to("/dev/zero")),
    "folder": ("is a directory, not a regular file", lambda p: p.mkdir()),
    "loop": ("is a symbolic link loop", lambda p: p.symlink_to(p.name)),
    "huge": ("is 2,147,483,648 bytes, over the 1 MiB limit for a SGLang source",
             lambda p: os.truncate(_touch(p), 2 << 30)),
    "nul": ("does not parse (", lambda p: p.write_bytes(b"from nixl._api import nixl_agent"
                                                         b"\x00\n")),
    "nested": ("does not parse (", lambda p: p.write_text("x = " + "-" * 100_000 + "1\n")),
}


def _touch(p: Path) -> Path:
    p.write_bytes(b"")
    return p


def _make(path: Path, kind: str) -> str:
    """``path`` replaced by the hostile ``kind`` of file; what the check must say of it."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    said, make = _HOSTILE[kind]
    make(path)
    return said


@pytest.mark.parametrize("kind", sorted(_HOSTILE))
@pytest.mark.parametrize(("args", "member"), [
    (DISAGG, "sglang/srt/disaggregation/nixl/conn.py"),
    (HICACHE, "sglang/srt/mem_cache/storage/nixl/hicache_nixl.py"),
], ids=["disagg", "hicache"])
def test_a_choice_module_that_cannot_be_read_is_said_never_taken_as_nothing(
        tmp_path: Path, kind: str, args: tuple[str, ...], member: str) -> None:
    """The module a choice runs is a FIFO, a link to a device, a folder, a link loop,
    2 GiB, NUL bytes, nested past the parser: what it imports is not known. The check
    says so naming the file, judges the packages its own reading of the choice names
    (nixl, absent here: not usable), never blocks nor reads past its cap. Before, the
    reading came back empty and the nixl it needs was not asked for: "nothing to check",
    usable."""
    site = _site(tmp_path)
    said = _make(site / member, kind)
    r = run(site, *args, ep=False)
    assert r.rc == 1, r.out
    skip = r.line("extensions")
    assert skip.startswith(f"skip  extensions: {args[-2]} nixl: {member} {said}"), r.out
    assert skip.endswith("judged as importing nixl (this check's own reading of the "
                         "choice)"), r.out
    assert r.line("nixl").startswith(f"fail  nixl: not installed ({args[-2]} nixl (this "
                                     f"check's reading: {member} {said}"), r.out


@pytest.mark.parametrize("kind", ["fifo", "loop", "nested", "many"])
def test_a_registry_that_cannot_be_read_is_named(tmp_path: Path, kind: str) -> None:
    """``backend_factory.py`` a FIFO, a loop, nested past the parser, or 10^5
    ``register_backend`` calls (5 MB: parsed, 640 MB resident; over the cap):
    the line names the registry and why, in bounded memory (before: "the installed SGLang
    keeps no module of it", and the 10^5 calls parsed)."""
    site = _site(tmp_path)
    registry = site / "sglang/srt/mem_cache/storage/backend_factory.py"
    if kind == "many":
        registry.write_text(_FACTORY + "".join(
            f"StorageBackendFactory.register_backend('b{i}', 'sglang.srt.x{i}', 'C')\n"
            for i in range(100_000)))
        said = f"is {registry.stat().st_size:,} bytes, over the 1 MiB limit"
    else:
        said = _make(registry, kind)
        if kind == "nested":
            said = "does not parse: the choices it registers are not known"
    r = run(site, *HICACHE, ep=False)
    assert r.rc == 1, r.out
    assert r.line("extensions").startswith(
        "skip  extensions: --hicache-storage-backend nixl: sglang/srt/mem_cache/storage/"
        f"backend_factory.py {said}"), r.out


def test_a_choice_linked_out_of_the_image_root_is_not_read(tmp_path: Path) -> None:
    """``--rootfs``: the choice's package is a link to a folder of this host, whose
    ``conn.py`` imports nothing of nixl: it is not listed nor read (it is not the
    image's), and the line says where it points; before, the host's folder was listed, its
    module refused silently, and the choice asked for nothing."""
    from moonpin.preflight.env.rootfs import ImageConfig
    from moonpin.preflight.run import check_image
    from tests.preflight.test_check_rootfs import venv_root

    root = tmp_path / "root"
    site = _site(tmp_path)
    shutil.copytree(site, venv_root(root), dirs_exist_ok=True, symlinks=True)
    host = tmp_path / "host_nixl"
    host.mkdir()
    (host / "__init__.py").write_text("")
    (host / "conn.py").write_text("import os\n")
    image_site = next(root.glob("opt/venv/lib/python*/site-packages"))
    pkg = image_site / "sglang/srt/disaggregation/nixl"
    shutil.rmtree(pkg)
    pkg.symlink_to(host)
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin"],
                      entrypoint=["/opt/venv/bin/python", "-m", "sglang.launch_server"])
    rep = check_image(elastic_ep_backend=None, launch_args=DISAGG[1:], rootfs=root,
                      config=cfg)
    said = {c.name: (c.status, c.message) for c in rep.checks}
    assert said["extensions"][0] == "skip", said
    assert "sglang/srt/disaggregation/nixl lies outside the image root" in said[
        "extensions"][1], said
    assert said["nixl"][0] == "fail" and rep.exit_code == 1, said


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_pth_that_never_ends_stops_the_worker_the_extensions_only_check_too(
        tmp_path: Path, kind: str) -> None:
    """A ``.pth`` file that is a FIFO or ``/dev/zero``: ``site`` never finishes reading it,
    so the worker never starts, whatever it would import. Said when only the other
    extensions are asked (``--disaggregation-transfer-backend nixl``, no mooncake backend)
    as when mooncake is: before, that check judged nixl and said usable."""
    site = _site(tmp_path)
    add_nixl_agent(site)
    _make(site / "zz.pth", kind)
    r = run(site, *DISAGG, ep=False)
    assert r.rc == 1, r.out
    assert r.line("interpreter").startswith(f"fail  interpreter: {site / 'zz.pth'} is a "), r.out


@pytest.mark.parametrize("kind", ["huge", "lines"])
def test_a_pth_too_large_to_read_is_said_not_ignored(tmp_path: Path, kind: str) -> None:
    """A ``.pth`` of 2 GiB, or of 10^5 ``import`` lines each inserting a folder (4.6 MB),
    is over the 1 MiB this check reads of one: ``site`` reads and runs it whole, so the
    ``sys.path`` modelled here may not be the worker's: a warning names the file (before,
    it was left out silently)."""
    site = _site(tmp_path)
    add_nixl_agent(site)
    pth = site / "zz.pth"
    if kind == "huge":
        _make(pth, "huge")
    else:
        pth.write_text("".join(f"import sys; sys.path.insert(0, '/opt/p{i}')\n"
                               for i in range(100_000)))
    r = run(site, *DISAGG, ep=False)
    assert r.rc == 0 and r.line("nixl").startswith("pass  nixl:"), r.out
    assert r.line("interpreter").startswith(
        f"warn  interpreter: {pth} is {pth.stat().st_size:,} bytes, over the 1 MiB this "
        "check reads of a .pth file: the folders it adds"), r.out
    assert "(1 warning;" in r.lines[-1], r.out


@pytest.mark.parametrize(("kind", "why"), [
    ("huge", "is 2,147,483,648 bytes, over the 4 MiB limit for a loader"),
    ("nul", "does not parse as this Python reads it ("),
])
def test_a_meta_the_rule_cannot_read_says_why(tmp_path: Path, kind: str, why: str) -> None:
    """nixl's meta ``__init__.py`` of 2 GiB, or with a NUL byte: not judged, and the line
    says why, as the confined read or the parser says it (before: "cannot be read",
    whatever the reason)."""
    site = _site(tmp_path)
    add_nixl_agent(site)
    _make(site / "nixl" / "__init__.py", kind)
    r = run(site, *DISAGG, ep=False)
    line = r.line("nixl")
    assert line.startswith("skip  nixl: nixl 1.5.1 at "), r.out
    assert f"not judged: {site / 'nixl' / '__init__.py'} {why}" in line, r.out
