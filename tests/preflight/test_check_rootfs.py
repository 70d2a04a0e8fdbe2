"""``moonpin check --rootfs DIR`` (and ``--image``): an image's root filesystem judged from
outside, on fake roots written around the fake images the other check tests use
(:mod:`tests.lib.images`, :mod:`tests.lib.scenario_image`): a Debian-like layout, a venv
whose interpreter is an absolute symbolic link, an editable SGLang checkout named by
absolute image paths. The verdict and lines must equal those of ``--site-packages`` on the
same image in place, but for the paths (image paths) and the fix lines (a Dockerfile's)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.preflight.env.rootfs import ImageConfig, target_for
from moonpin.preflight.judge.dockerfile import dockerfile_fix
from moonpin.preflight.run import check_image
from tests.lib.checkrun import ROOT, Run, run, small_kb
from tests.lib.images import add_mooncake, add_torch, ext_suffix, healthy_image
from tests.preflight.test_importer import SETUPTOOLS_FINDER, editable_dist, write_sglang_sources

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def python_at(root: Path, image: str, version: str = PY, *, debian: bool = True) -> None:
    """A stand-in interpreter file at ``image`` (``/usr/bin/python3.X``) and the standard
    library folder its prefix has (``os.py``, getpath's landmark; Debian's ``site.py``)."""
    exe = root / image.lstrip("/")
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_bytes(b"\x7fELF stand-in")
    exe.chmod(0o755)
    prefix = Path(image).parent.parent
    std = root / str(prefix).lstrip("/") / "lib" / f"python{version}"
    std.mkdir(parents=True, exist_ok=True)
    (std / "os.py").write_text("")
    (std / "site.py").write_text("# Debian's: /usr/lib/python3/dist-packages\n" if debian
                                 else "# upstream\n")
    (std / "lib-dynload").mkdir(exist_ok=True)


def debian_root(root: Path, version: str = PY) -> Path:
    """``/usr/bin/python3 -> python3.X``, pip installs in ``/usr/local/lib/python3.X/
    dist-packages`` (SGLang's own image); returns that folder."""
    python_at(root, f"/usr/bin/python{version}", version)
    (root / "usr/bin/python3").symlink_to(f"python{version}")
    site = root / f"usr/local/lib/python{version}/dist-packages"
    site.mkdir(parents=True)
    return site


def venv_root(root: Path, *, system_site: bool = False) -> Path:
    """``/opt/venv/bin/python -> /usr/bin/python3.X`` (absolute: only inside the root does
    it name the image's interpreter), ``pyvenv.cfg`` with ``home = /usr/bin``."""
    python_at(root, f"/usr/bin/python{PY}")
    (root / "usr/bin/python3").symlink_to(f"python{PY}")
    venv = root / "opt/venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python").symlink_to(f"/usr/bin/python{PY}")
    (venv / "bin/python3").symlink_to("python")
    (venv / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = {str(system_site).lower()}\n"
        f"version = {PY}.7\n")
    site = venv / f"lib/python{PY}/site-packages"
    site.mkdir(parents=True)
    return site


def run_root(root: Path, *args: str, kb: Path | None = None) -> Run:
    cmd = [sys.executable, "-m", "moonpin.preflight", "--rootfs", str(root),
           "--elastic-ep-backend", "mooncake", *(["--kb", str(kb)] if kb else []), *args]
    env = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    return Run(proc)


def normalised(r: Run, site: Path, image_site: str, fixes: bool) -> list[str]:
    """The lines but the target and deep-probe ones, paths as the image names them; a
    compiling loader's toolchain line says the image's case (no host GPU matters) in the
    image's report, so only its status is compared."""
    out = []
    for line in r.lines[:-1]:
        if line.split(None, 1)[-1].startswith(("target:", "deep probe:")):
            continue
        if line.split(None, 1)[-1].startswith("toolchain:"):
            assert image_site not in line or "this host" not in line, line
            out.append(line.split(":", 1)[0])
            continue
        line = line.replace(str(site), image_site)
        # who owns a missing library is asked of each target's own dpkg database: the
        # image's under a root, this machine's in place (judge/owners.py)
        line = re.sub(r"(RECORD lists \S+)(, nor [^:;]*dpkg database|, and [^:;]* has no dpkg "
                      r"database|; [^:;]*dpkg database lists it as package \S+, and it is "
                      r"there)", r"\1, <the target's dpkg database>", line)
        if fixes and line.startswith("  fix: "):
            line = "  fix: " + dockerfile_fix(line[7:], "pip")
        out.append(line)
    return out


# --------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("site_py", [True, False])
def test_debian_layout_with_dist_packages(tmp_path: Path, site_py: bool) -> None:
    """Debian's ``site.py`` says ``dist-packages``; without one (an image unpacked to what
    the check reads) the ``dist-packages`` folders of Debian's layout say it."""
    root = tmp_path / "root"
    site = debian_root(root)
    healthy_image(site)
    if not site_py:
        (root / f"usr/lib/python{PY}/site.py").unlink()
    r = run_root(root, kb=small_kb(tmp_path))
    assert r.rc == 0, r.out
    assert r.line("target:") == (
        f"pass  target: python {PY} /usr/bin/python3; reading /usr/lib/python{PY}, "
        f"/usr/lib/python{PY}/lib-dynload, /usr/local/lib/python{PY}/dist-packages (the "
        f"image's /usr/bin/python3 -> /usr/bin/python{PY})")
    assert f"from /usr/local/lib/python{PY}/dist-packages/sglang" in r.line("sglang:")
    assert str(root) not in r.out
    assert r.lines[-1] == "usable (deep probe not run: nothing in the image runs)"


def test_the_version_decides_the_extension_suffix(tmp_path: Path) -> None:
    """python3.12 in the image: a build named for this interpreter's version is not the
    one ``import mooncake.pg_2_13_0`` finds there; renamed for 3.12 it is."""
    other = "3.12" if PY != "3.12" else "3.13"
    root = tmp_path / "root"
    site = debian_root(root, other)
    healthy_image(site)
    kb = small_kb(tmp_path)
    r = run_root(root, kb=kb)
    assert r.rc == 1 and r.status("build") == "fail", r.out
    tag = other.replace(".", "")
    for f in [*(site / "mooncake").iterdir(), *(site / "torch").iterdir()]:  # torch._C too
        if f.name.endswith(ext_suffix()):
            f.rename(f.with_name(f.name.replace(ext_suffix(),
                                                f".cpython-{tag}-{os.uname().machine}-linux-gnu.so")))
    r = run_root(root, kb=kb)
    assert r.rc == 0 and f"python {other} /usr/bin/python3" in r.line("target:"), r.out


def test_venv_with_an_absolute_interpreter_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    site = venv_root(root)
    healthy_image(site)
    decoy = root / "usr/lib/python3/dist-packages"  # the system's: not in this venv
    add_mooncake(decoy, version="0.3.8", torch_builds=("2.8.0",))
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin"],
                      entrypoint=["/opt/venv/bin/python", "-m", "sglang.launch_server"],
                      working_dir="/sgl-workspace")
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg,
                      kb_path=small_kb(tmp_path))
    assert rep.exit_code == 0, [c.as_dict() for c in rep.checks]
    target = next(c.message for c in rep.checks if c.name == "target")
    assert target.startswith(f"python {PY} /opt/venv/bin/python; reading /usr/lib/python{PY}")
    assert f"/opt/venv/lib/python{PY}/site-packages" in target
    assert "a venv (/opt/venv/pyvenv.cfg)" in target and "dist-packages" not in target
    # with the system site folder, the venv's own still comes first
    (root / "opt/venv/pyvenv.cfg").write_text("home = /usr/bin\n"
                                              "include-system-site-packages = true\n")
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg,
                      kb_path=small_kb(tmp_path))
    t = target_for(str(root), cfg)
    assert [p[len(str(t.root)):] for p in t.paths] == [  # no /sgl-workspace folder
        f"/usr/lib/python{PY}", f"/usr/lib/python{PY}/lib-dynload",
        f"/opt/venv/lib/python{PY}/site-packages",
        "/usr/lib/python3/dist-packages"]
    assert rep.exit_code == 0


@pytest.mark.parametrize(("env", "want"), [
    ({}, ["/w", "/opt/stale", "/usr/lib/python{py}", "/usr/lib/python{py}/lib-dynload",
          "/opt/venv/lib/python{py}/site-packages", "/opt/late"]),
    # PYTHONPATH after what site inserts; a relative or empty entry from the working folder
    ({"PYTHONPATH": "/opt/good:rel:"}, ["/w", "/opt/stale", "/opt/good", "/w/rel",
                                        "/usr/lib/python{py}"]),  # the empty one: /w again
    ({"PYTHONPATH": "/opt/good", "PYTHONSAFEPATH": "1"}, ["/opt/stale", "/opt/good",
                                                         "/usr/lib/python{py}"]),
])
def test_the_site_code_of_an_image_edits_its_path(tmp_path: Path, env: dict[str, str],
                                                  want: list[str]) -> None:
    """``--rootfs``: a ``.pth`` ``import`` line's ``sys.path.insert(0, ...)`` puts its folder
    before ``PYTHONPATH`` and the standard library, ``sitecustomize``'s ``append`` after the
    site folders (both read, never run); ``PYTHONPATH``'s relative and empty entries are the
    worker's working folder's (``site`` makes them absolute); ``PYTHONSAFEPATH`` in the
    image's ``Env`` leaves the working folder out. Before, the image's ``.pth`` and
    ``sitecustomize`` edits were not read at all (a stale ``sgl_kernel`` a ``.pth`` line put
    first was not what the check judged, hunt I) and relative entries were dropped."""
    root = tmp_path / "root"
    site = venv_root(root)
    for d in ("opt/stale", "opt/good", "opt/late", "w/rel"):
        (root / d).mkdir(parents=True)
    (site / "zz.pth").write_text("import sys; sys.path.insert(0, '/opt/stale')\n")
    (site / "sitecustomize.py").write_text("import sys\nsys.path.append('/opt/late')\n")
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin", *(f"{k}={v}" for k, v in env.items())],
                      entrypoint=["/opt/venv/bin/python", "-m", "sglang.launch_server"],
                      working_dir="/w")
    t = target_for(str(root), cfg)
    got = [p[len(str(t.root)):] for p in t.paths]
    assert got[:len(want)] == [w.format(py=PY) for w in want], got


@pytest.mark.parametrize(("layout", "env", "user", "args", "first"), [
    ("debian", [], "", [], "/root/.local/lib/python{py}/site-packages"),  # before the system's
    ("debian", ["HOME=/home/w"], "", [], "/home/w/.local/lib/python{py}/site-packages"),
    ("debian", [], "1000", [], "/home/w/.local/lib/python{py}/site-packages"),  # passwd's home
    ("debian", ["PYTHONUSERBASE=/ub"], "", [], "/ub/lib/python{py}/site-packages"),
    ("debian", ["PYTHONNOUSERSITE=1"], "", [], None),
    ("debian", [], "", ["-s"], None),
    ("debian", ["PYTHONNOUSERSITE=1"], "", ["-E"], "/root/.local/lib/python{py}/site-packages"),
    ("debian", ["HOME=/home/w", "PYTHONUSERBASE=/ub"], "", ["-E"],
     "/home/w/.local/lib/python{py}/site-packages"),
    ("venv-system", [], "", [], "/root/.local/lib/python{py}/site-packages"),  # after the venv's
    ("venv", [], "", [], None),  # a venv without the system's site folders: site turns it off
])
def test_the_users_site_folder_of_an_image(tmp_path: Path, layout: str, env: list[str],
                                           user: str, args: list[str], first: str | None
                                           ) -> None:
    """``--rootfs``: the user's site folder of the image's worker (``~/.local/lib/pythonX.Y/
    site-packages`` of its ``HOME``, else of its ``/etc/passwd`` home; ``PYTHONUSERBASE``'s)
    is on its ``sys.path`` before the system's site folders (after a venv's own) unless
    ``site`` turns it off (``-s``, ``PYTHONNOUSERSITE`` when the environment is read, a venv
    without the system's folders), and its ``usercustomize`` is run then. Before, it was left
    out (hunt J: a stale copy there, or a library its ``usercustomize`` loads, not judged)."""
    root = tmp_path / "root"
    if layout == "debian":
        system = debian_root(root)
        python = f"/usr/bin/python{PY}"
    else:
        venv_root(root, system_site=layout == "venv-system")
        system = root / f"usr/local/lib/python{PY}/dist-packages"
        system.mkdir(parents=True)
        python = "/opt/venv/bin/python"
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\nw:x:1000:1000::/home/w:/bin/sh\n")
    for home in ("root", "home/w", "ub"):
        base = "ub" if home == "ub" else f"{home}/.local"
        (root / base / f"lib/python{PY}/site-packages").mkdir(parents=True)
    cfg = ImageConfig(env=["PATH=/usr/bin:/bin", *env], user=user or None,
                      entrypoint=[python, *args, "-m", "sglang.launch_server"], working_dir="/")
    t = target_for(str(root), cfg)
    got = [p[len(str(t.root)):] for p in t.paths]
    users = [p for p in got if "/.local/" in p or p.startswith("/ub/")]
    assert users == ([first.format(py=PY)] if first else []), got
    assert t.customize == (("sitecustomize", "usercustomize") if first else ("sitecustomize",))
    if first:
        own = [p for p in got if p.startswith("/opt/venv/")]
        assert got.index(users[0]) < got.index(str(system)[len(str(root)):]), got
        assert all(got.index(p) < got.index(users[0]) for p in own), got


@pytest.mark.parametrize(("entry", "pip"), [
    (["/opt/venv/bin/python", "-m", "sglang.launch_server"], "/opt/venv/bin/python -m pip"),
    (["python3", "-m", "sglang.launch_server"], "pip"),
    (["/bin/sh", "-c", "exec /opt/venv/bin/python -m sglang.launch_server"],
     "/opt/venv/bin/python -m pip"),
])
def test_fix_lines_are_written_for_a_dockerfile(tmp_path: Path, entry: list[str],
                                                pip: str) -> None:
    root = tmp_path / "root"
    site = venv_root(root)
    healthy_image(site, torch_builds=("2.12.0",))  # no build for the installed torch 2.13.0
    # PATH's python3 is the system's: the venv's is named in full
    cfg = ImageConfig(env=["PATH=/usr/bin" if pip != "pip" else "PATH=/opt/venv/bin"],
                      entrypoint=entry)
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg,
                      kb_path=small_kb(tmp_path),
                      fix_provider=lambda *_: ["mooncake-transfer-engine-cuda13==0.3.14"])
    assert rep.exit_code == 1
    fixes = [c.fix for c in rep.checks if c.status == "fail" and c.fix]
    assert fixes and any(f.startswith(f"RUN {pip} install ") for f in fixes), fixes
    assert not any(str(root) in (c.fix or "") + c.message for c in rep.checks)


def test_dockerfile_fix() -> None:
    assert dockerfile_fix("pip install --force-reinstall --no-deps 'torch==2.13.0' "
                          "(why: a reason)", "/opt/venv/bin/python -m pip") == (
        "RUN /opt/venv/bin/python -m pip install --force-reinstall --no-deps "
        "'torch==2.13.0'  # why: a reason")
    assert dockerfile_fix("pip uninstall -y a b && pip install 'a==1'", "pip") == (
        "RUN pip uninstall -y a b && pip install 'a==1'")
    assert dockerfile_fix("pip uninstall -y a b; then pip install 'a==1'", "pip") == (
        "RUN pip uninstall -y a b && pip install 'a==1'")
    assert dockerfile_fix("install what provides each one in the image", "pip") == (
        "install what provides each one in the image")


def test_editable_checkout_named_by_image_paths(tmp_path: Path) -> None:
    """SGLang's image: ``pip install -e python`` in /sgl-workspace/sglang; the finder's
    MAPPING names /sgl-workspace/..., which only inside the root is the checkout."""
    root = tmp_path / "root"
    site = debian_root(root)
    add_torch(site)
    add_mooncake(site)
    version = "0.5.99.dev0"
    tag = version.replace(".", "_")
    (site / f"__editable__.sglang-{version}.pth").write_text(
        f"import __editable___sglang_{tag}_finder; __editable___sglang_{tag}_finder.install()")
    (site / f"__editable___sglang_{tag}_finder.py").write_text(SETUPTOOLS_FINDER.format(
        mapping={"sglang": "/sgl-workspace/sglang/python/sglang"}, version=version))
    editable_dist(site, version, "/sgl-workspace/sglang/python")
    write_sglang_sources(root / "sgl-workspace/sglang/python/sglang",
                         extra_name="NoReleaseHasThis")
    r = run_root(root, kb=small_kb(tmp_path))
    assert (f"sglang {version} from /sgl-workspace/sglang/python/sglang (editable)"
            in r.line("sglang:")), r.out
    assert r.status("names") == "fail" and "NoReleaseHasThis" in r.line("names:")
    assert r.rc == 1


# --------------------------------------------------------------------------- agreement


def _variants(site: Path, which: str) -> None:
    if which == "healthy":
        healthy_image(site)
    elif which == "no build":
        healthy_image(site, torch_builds=("2.12.0",))
    elif which == "name missing":
        healthy_image(site, names=("MooncakeBackendOptions", "join_group"))
    elif which == "cuda 12 build":
        healthy_image(site, cuda=12)
    elif which == "rename":
        healthy_image(site, loaders=("ep",))


@pytest.mark.parametrize("which", ["healthy", "no build", "name missing", "cuda 12 build",
                                   "rename"])
def test_rootfs_agrees_with_site_packages(tmp_path: Path, which: str) -> None:
    root = tmp_path / "root"
    site = debian_root(root)
    _variants(site, which)
    kb = small_kb(tmp_path)
    inside = run_root(root, kb=kb)
    # the image in place: no system libraries either way (none are in the root)
    here = run(site, kb=kb)
    image_site = f"/usr/local/lib/python{PY}/dist-packages"
    assert inside.rc == here.rc
    assert inside.lines[-1].split(" (")[0] == here.lines[-1].split(" (")[0]
    assert normalised(inside, site, image_site, False) == normalised(here, site, image_site,
                                                                     True)


def _scenarios() -> list[object]:
    from tests.resolver.test_agreement import _params

    return _params()[:12]


@pytest.mark.parametrize(("kb_slice", "args"), _scenarios())
def test_scenario_images_agree(kb_slice: dict[str, object], args: dict[str, object],
                               tmp_path: Path) -> None:
    """The images of the agreement scenarios (:mod:`tests.lib.scenario_image`), each put in
    a root: the same exit code and the same deciding failures as in place."""
    from moonpin.resolver import query
    from moonpin.resolver.graph import CompatGraph
    from tests.lib.scenario_image import Inexpressible, image_for
    from tests.resolver.kbslice import build_kb
    from tests.resolver.test_agreement import _failing

    kb = build_kb(kb_slice)
    res = query.explain(CompatGraph(kb), **args).to_json()
    try:
        img = image_for(kb, res, tmp_path)
    except Inexpressible as e:
        pytest.skip(str(e))
    root = tmp_path / "root"
    site = debian_root(root)
    shutil.copytree(img.site, site, dirs_exist_ok=True, symlinks=True)
    # a loader that compiles at first import looks for nvcc and ninja in the target: the
    # image's own under its root, this host's in place; both get the same stand-ins
    host = tmp_path / "tools"
    for tool in (root / "usr/bin/ninja", root / "usr/local/cuda/bin/nvcc", host / "ninja",
                 host / "cuda/bin/nvcc"):
        tool.parent.mkdir(parents=True, exist_ok=True)
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    inside = run_root(root, kb=img.kb)
    here = run(img.site, kb=img.kb, env={"PATH": f"{host}:{os.environ['PATH']}",
                                        "CUDA_HOME": str(host / "cuda")})
    assert inside.rc == here.rc, (inside.out, here.out)
    assert _failing(inside.lines) == _failing(here.lines)
    image_site = f"/usr/local/lib/python{PY}/dist-packages"
    assert normalised(inside, site, image_site, False) == normalised(here, img.site,
                                                                     image_site, True)


# --------------------------------------------------------------------------- command line


@pytest.mark.parametrize("other", [["--python", sys.executable], ["--site-packages", "/tmp"]])
@pytest.mark.parametrize("json_out", [False, True])
def test_rootfs_is_exclusive_with_python_and_site_packages(tmp_path: Path, other: list[str],
                                                           json_out: bool) -> None:
    root = tmp_path / "root"
    debian_root(root)
    r = run_root(root, *other, *(["--json"] if json_out else []))
    assert r.rc == 2
    assert f"--rootfs and {other[0]} cannot be used together" in r.err
    assert "tip: " in r.err
    if json_out:
        doc = json.loads(r.out)
        assert doc["exit_code"] == 2 and doc["checks"][0]["name"] == "command line"


def test_platform_needs_image(tmp_path: Path) -> None:
    root = tmp_path / "root"
    debian_root(root)
    r = run_root(root, "--platform", "linux/amd64")
    assert r.rc == 2 and "--platform" in r.err and "needs --image" in r.err


def test_not_a_root(tmp_path: Path) -> None:
    r = run_root(tmp_path / "absent")
    assert r.rc == 2 and "is not a folder" in r.err
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_root(empty)
    assert r.rc == 2 and "has no 'python3' on its PATH" in r.err


def test_image_file(tmp_path: Path) -> None:
    """``--image``: once :mod:`moonpin.readers.image.manifest` is there, an OCI layout made of a
    root."""
    ri = pytest.importorskip("moonpin.readers.image.manifest")
    umoci = shutil.which("umoci")
    if umoci is None:
        pytest.skip("umoci is not installed")
    root = tmp_path / "bundle" / "rootfs"
    site = debian_root(root)
    healthy_image(site)
    layout = tmp_path / "oci"
    subprocess.run([umoci, "init", "--layout", str(layout)], check=True, timeout=60)
    subprocess.run([umoci, "new", "--image", f"{layout}:t"], check=True, timeout=60)
    subprocess.run([umoci, "insert", "--image", f"{layout}:t", str(root), "/"], check=True,
                   timeout=120)
    r = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--image", f"{layout}",
                        "--elastic-ep-backend", "mooncake", "--kb", str(small_kb(tmp_path))],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"/usr/local/lib/python{PY}/dist-packages/sglang" in r.stdout
    assert ri is not None
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not an image")
    r = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--image", str(bad),
                        "--json", "--elastic-ep-backend", "mooncake"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "tip: " in r.stderr and "Traceback" not in r.stderr
    assert json.loads(r.stdout)["exit_code"] == 2


# --------------------------------------------------------------------------- the real image

REALIMG = os.environ.get("MOONPIN_TEST_REALIMG", "/tmp/realimg")


def _real_root(dest: Path) -> Path:
    """The real venv under a root, as an image has it: ``/opt/venv`` (hard links), its
    base interpreter at the path its ``pyvenv.cfg`` names, the host's libraries in
    ``/usr/lib``, ``/usr/lib64`` and its loader cache (hard links; same file system)."""
    venv = Path(REALIMG) / "venv"
    home = next(line.split("=", 1)[1].strip() for line in
                (venv / "pyvenv.cfg").read_text().splitlines() if line.startswith("home"))
    base = Path(home).parent
    (dest / "usr").mkdir(parents=True)
    for sub in ("lib", "lib64"):
        subprocess.run(["cp", "-al", f"/usr/{sub}", str(dest / "usr" / sub)], check=True)
        (dest / sub).symlink_to(f"usr/{sub}")
    (dest / "etc").mkdir()
    shutil.copy("/etc/ld.so.cache", dest / "etc/ld.so.cache")
    (dest / str(base).lstrip("/")).parent.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(base), str(dest / str(base).lstrip("/"))], check=True)
    (dest / "opt").mkdir()
    subprocess.run(["cp", "-al", str(venv), str(dest / "opt/venv")], check=True)
    return dest


@pytest.mark.image
@pytest.mark.skipif(not (Path(REALIMG) / "venv/bin/python").exists(),
                    reason="no real image (../shared/tools/realimg/build.sh --minimal)")
def test_real_image_root_agrees_with_its_python(tmp_path: Path) -> None:
    """``--rootfs`` on the real venv under a root gives ``--python``'s verdict, symbol
    binding included; with the torch 2.12 build in place of 2.13's (a copied file), both
    say "not usable" with the undefined symbol the real import names."""
    root = _real_root(tmp_path / "root")
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin",
                           f"LD_LIBRARY_PATH={REALIMG}/stubs"],
                      entrypoint=["/opt/venv/bin/python", "-m", "sglang.launch_server"])
    env = {**os.environ, "LD_LIBRARY_PATH": f"{REALIMG}/stubs"}
    for broken in (False, True):
        if broken:
            pkg = root / "opt/venv/lib/python3.11/site-packages/mooncake"
            new = next(pkg.glob("pg_2_13_0.*.so"))
            shutil.copyfile(next(pkg.glob("pg_2_12_0.*.so")), tmp_path / "pg.so")
            new.unlink()  # a hard link: replaced, never written through
            shutil.copyfile(tmp_path / "pg.so", new)
        rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg)
        python = str(root / "opt/venv/bin/python") if broken else f"{REALIMG}/venv/bin/python"
        if broken:  # the real import in the copy, through its own (hard-linked) interpreter
            real = subprocess.run([python, "-c", "import mooncake.pg"], capture_output=True,
                                  text=True, env=env, timeout=300)
            assert "undefined symbol: " in real.stderr
            symbol = real.stderr.split("undefined symbol: ")[1].split()[0]
        here = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python", python,
                               "--elastic-ep-backend", "mooncake", "--json", "--no-deep"],
                              cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
        doc = json.loads(here.stdout)
        assert rep.exit_code == doc["exit_code"] == (1 if broken else 0), here.stdout
        mine = {c.name: c for c in rep.checks}
        theirs = {c["name"]: c for c in doc["checks"]}
        assert mine["symbols"].status == theirs["symbols"]["status"]
        assert mine["symbols"].message.split(";")[0] == theirs["symbols"]["message"].split(";")[0]
        if broken:
            from moonpin.preflight.loader.ldbind import demangle

            assert demangle(symbol).split("(")[0] in mine["symbols"].message
            assert (mine["symbols"].fix or "").startswith("RUN pip install ")
        assert str(root) not in json.dumps([c.as_dict() for c in rep.checks])


@pytest.mark.skipif(not Path("/etc/ld.so.cache").is_file(), reason="no /etc/ld.so.cache here")
def test_a_cache_entry_whose_file_is_gone_is_not_found(tmp_path: Path) -> None:
    """An image whose /etc/ld.so.cache lists libraries it does not hold (a cache copied
    without them, or left stale by a removal): ld.so opens the cached path, fails and
    searches the default folders, so the library is missing; it was taken as found (a real
    packed image was said to have its RDMA libraries and only its symbols unbound)."""
    from moonpin.preflight.loader import ldso

    cached = ldso.ld_cache_paths("/etc/ld.so.cache")
    name, host_path = next(iter(sorted(cached.items())))
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    shutil.copy("/etc/ld.so.cache", root / "etc" / "ld.so.cache")
    cache = ldso.ld_cache_paths(ldso.ld_cache_file(str(root)))
    assert name in cache
    node = ldso.Node(str(root / "app.so"), None)
    system = ldso.system_lib_dirs(str(root), "x86_64")

    def search() -> str | None:
        return next(iter(ldso.candidates(name, node, [], cache, system, str(root))), None)

    assert search() is None
    # control: with the file in the image, the cache's answer stands
    inside = root / host_path.lstrip("/")
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.write_bytes(b"")
    assert search() is not None


# ------------------------------------------------------- bundles, --image-env, --interpreter


def _venv_image(root: Path) -> Path:
    """A venv image (``/opt/venv``, ``ENV PATH=/opt/venv/bin:$PATH``) whose venv holds the
    healthy fake image, laid out as `docker export` leaves it (no config)."""
    site = venv_root(root)
    shutil.copytree(healthy_image(root.parent / "img"), site, dirs_exist_ok=True,
                    symlinks=True)
    return site


def _bundle(where: Path) -> Path:
    """What `umoci unpack` leaves: config.json (the OCI runtime spec's process) beside
    rootfs/."""
    _venv_image(where / "rootfs")
    (where / "config.json").write_text(json.dumps({
        "ociVersion": "1.0.2", "root": {"path": "rootfs"},
        "process": {"args": ["/opt/venv/bin/python", "-m", "sglang.launch_server"],
                    "env": ["PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin",
                            "HOSTNAME=x"], "cwd": "/"}}))
    return where


def _verdict(r: Run) -> tuple[int, list[str]]:
    return r.rc, [ln for ln in r.lines if not ln.startswith(("pass  target:", "warn  interp"))]


def test_a_bundle_or_its_rootfs_brings_its_config(tmp_path: Path) -> None:
    """`check --rootfs BUNDLE` on a `umoci unpack` of a venv image: the bundle's
    config.json gives PATH and args (issue 40: it was not read; no interpreter was
    found in the bundle, and its rootfs/ was judged with python3 of the default PATH)."""
    bundle = _bundle(tmp_path / "bundle")
    kb = small_kb(tmp_path)
    whole, inner = run_root(bundle, kb=kb), run_root(bundle / "rootfs", kb=kb)
    assert whole.rc == 0, whole.out + whole.err
    assert "/opt/venv/bin/python" in whole.lines[0] and "(the image's" in whole.lines[0]
    assert _verdict(whole) == _verdict(inner)
    # the same tree exported without its config: a warning says what to pass ...
    export = tmp_path / "export"
    _venv_image(export)
    bare = run_root(export, kb=kb)
    assert bare.rc == 1 and bare.status("interpreter") == "warn", bare.out
    assert "--interpreter /opt/venv/bin/python" in bare.out
    assert "--image-env PATH=" in bare.out
    # ... and either option gives the bundle's verdict
    for how in (["--interpreter", "/opt/venv/bin/python"],
                ["--image-env", "PATH=/opt/venv/bin:/usr/bin:/bin"]):
        assert _verdict(run_root(export, *how, kb=kb)) == _verdict(whole), how


def test_image_env_and_interpreter_are_checked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _venv_image(root)
    r = run_root(root, "--image-env", "PATH")
    assert r.rc == 2 and "--image-env 'PATH' is not KEY=VALUE" in r.err
    r = run_root(root, "--interpreter", "/opt/nothing/bin/python")
    assert r.rc == 2 and "/opt/nothing/bin/python is unreadable" in r.err
    assert "tip: name the image's interpreter (the image holds /opt/venv/bin/python)" in r.err
    # `--python` beside --rootfs: the tip says how to name the image's own interpreter
    r = run_root(root, "--python", "/opt/venv/bin/python")
    assert r.rc == 2 and "--interpreter /opt/venv/bin/python" in r.err
    assert "moonpin check --rootfs" not in r.err  # not the command that failed, again
    # and they describe an image: alone they are a mistake
    alone = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--interpreter",
                            "/x", "--elastic-ep-backend", "mooncake"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert alone.returncode == 2 and "need --rootfs or --image" in alone.stderr


def test_a_cpu_torch_image_is_told_to_install_torchs_cuda_build(tmp_path: Path) -> None:
    """An image with a CPU torch beside a CUDA 13 mooncake build: the missing libcudart.so.13
    comes with torch's CUDA build (issue 40: the image was told to change its mooncake
    distribution, a fix line installed an older sglang)."""
    from tests.lib.images import add_sglang

    root = tmp_path / "root"
    site = venv_root(root)
    add_torch(site, version="2.13.0+cpu", cuda=None)
    add_sglang(site, version="0.5.21")
    add_mooncake(site)
    r = run_root(root, "--interpreter", "/opt/venv/bin/python",
                 kb=ROOT / "data" / "kb.json")
    assert r.rc == 1 and r.status("libraries") == "fail", r.out
    line = next(ln for ln in r.lines if ln.startswith("fail  libraries:"))
    assert "a CUDA build of torch brings" in line and "mooncake distribution" not in line
    fixes = [ln for ln in r.lines if ln.startswith("  fix: ")]
    assert fixes and all("'torch==2.13.0,!=2.13.0+cpu'" in f for f in fixes), fixes
    assert "this host" not in r.out


def test_a_compiling_loaders_toolchain_is_looked_for_in_the_image(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mooncake 0.3.14 compiles at first import with the image's nvcc and ninja: they are
    looked for on the image's own PATH (and its CUDA_HOME, /usr/local/cuda) under its root,
    never on this host's, which here has both."""
    from tests.lib.images import add_sglang

    root = tmp_path / "root"
    site = debian_root(root)
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, version="0.3.14", jit=True)
    host = tmp_path / "host"
    (host / "cuda" / "bin").mkdir(parents=True)
    for tool in (host / "ninja", host / "cuda" / "bin" / "nvcc"):
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{host}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_HOME", str(host / "cuda"))
    monkeypatch.setenv("MOONPIN_CHECK_CUDA_FALLBACK", str(host / "cuda"))
    cfg = ImageConfig(env=["PATH=/usr/local/bin:/usr/bin:/bin"])

    def toolchain() -> str:
        rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg,
                          kb_path=small_kb(tmp_path), deep=False, source_cache=False)
        line = next(c for c in rep.checks if c.name == "toolchain")
        return f"{line.status} {line.message}"

    line = toolchain()
    assert line.startswith("fail") and "needs ninja" in line and "nvcc" in line, line
    # control: the image's own tools
    monkeypatch.setenv("MOONPIN_CHECK_CUDA_FALLBACK", "/usr/local/cuda")
    for tool in (root / "usr/bin/ninja", root / "usr/local/cuda/bin/nvcc"):
        tool.parent.mkdir(parents=True, exist_ok=True)
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    line = toolchain()
    assert line.startswith("warn"), line
    assert "ninja at /usr/bin/ninja" in line and "at /usr/local/cuda/bin/nvcc" in line
