"""A file the worker's user cannot read (issue 37/39 leftover): the check runs as root, which
reads anything, while the worker runs as its image config's ``User`` (or, checked live, as
the check's own user). The worker's identity comes from the image's ``/etc/passwd`` and
``/etc/group`` as runc resolves it; readability is judged from the modes as the kernel does
(:meth:`moonpin.preflight.access.identity.Identity.may_read`), held here against the kernel itself
by opening the same files as those users."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonpin.preflight.access.identity import Identity
from moonpin.preflight.env.rootfs import ImageConfig, worker_identity
from moonpin.preflight.env.target import TargetError
from tests.lib.checkrun import (
    NOBODY,
    ROOT,
    Run,
    as_nobody,
    check_as_nobody,
    nobody_python,
    open_to_all,
)
from tests.lib.extimages import add_nixl, torch_image
from tests.preflight.test_check_rootfs import venv_root

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other users")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every user can enter (pytest's tmp_path lies in one only root can)."""
    where = Path(tempfile.mkdtemp(prefix="moonpin-user-"))
    where.chmod(0o755)
    try:
        yield where
    finally:
        for p in [where, *where.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(where)


# ------------------------------------------------------------- the modes, as the kernel reads them

#: (uid, primary gid, supplementary gids) of the users the kernel is asked about
USERS = [(1000, 1000, ()), (1001, 1000, ()), (1001, 3000, (2000,)), (1002, 1002, ()),
         (2000, 2000, (1000,))]


def _tree(base: Path) -> list[Path]:
    """Files owned by 1000:1000 (or 1000:2000) in every class of mode, some behind folders
    that not everyone may search."""
    files = []
    for mode in (0o600, 0o640, 0o604, 0o060, 0o006, 0o400, 0o044, 0o000, 0o200, 0o444):
        for group in (1000, 2000):
            f = base / f"f{mode:03o}-{group}"
            f.write_text("x")
            os.chown(f, 1000, group)
            f.chmod(mode)
            files.append(f)
    for mode in (0o700, 0o750, 0o701, 0o711, 0o705, 0o770, 0o600, 0o755):
        d = base / f"d{mode:03o}"
        d.mkdir()
        f = d / "f"
        f.write_text("x")
        f.chmod(0o644)
        os.chown(d, 1000, 2000)
        d.chmod(mode)
        files.append(f)
    return files


def _kernel(python: str, files: list[Path], uid: int, gid: int,
            extra: tuple[int, ...]) -> list[bool]:
    code = ("import json, sys\nout = []\nfor p in sys.argv[1:]:\n    try:\n"
            "        open(p, 'rb').close()\n        out.append(True)\n"
            "    except PermissionError:\n        out.append(False)\nprint(json.dumps(out))\n")
    proc = subprocess.run([python, "-c", code, *map(str, files)], capture_output=True,
                          text=True, timeout=60, user=uid, group=gid, extra_groups=list(extra))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


@as_root
def test_readability_is_what_the_kernel_decides(open_tmp: Path) -> None:
    python = nobody_python()
    files = _tree(open_tmp)
    for uid, gid, extra in USERS:
        truth = _kernel(python, files, uid, gid, extra)
        said = [Identity(uid, (gid, *extra), "t").may_read(str(f)) for f in files]
        wrong = [(str(f), t) for f, t, s in zip(files, truth, said, strict=True) if t != s]
        assert not wrong, (uid, gid, extra, wrong)
        assert True in truth and False in truth  # each user meets both outcomes
    assert all(Identity(0, (0,), "root").may_read(str(f)) for f in files)


# ----------------------------------------------------------------- the config's User, resolved

PASSWD = ("root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/home/app:/bin/sh\n"
          "svc:x:1001:1001::/:/bin/sh\n")
GROUP = ("root:x:0:\nvideo:x:44:app\napp:x:1000:\nrender:x:109:app,svc\nsvc:x:1001:\n")


@pytest.fixture
def image_root(tmp_path: Path) -> Path:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(PASSWD)
    (tmp_path / "etc/group").write_text(GROUP)
    return tmp_path


@pytest.mark.parametrize(("user", "uid", "gids"), [
    (None, 0, (0,)),
    ("", 0, (0,)),
    ("app", 1000, (1000, 44, 109)),       # its group and every group that lists it
    ("1000", 1000, (1000, 44, 109)),      # a number in /etc/passwd: the same user
    ("app:video", 1000, (44,)),           # a group given: that group alone
    ("app:109", 1000, (109,)),
    ("1000:1001", 1000, (1001,)),
    ("4242", 4242, (0,)),                 # a number the image does not name: gid 0
    ("4242:4242", 4242, (4242,)),
    ("svc", 1001, (1001, 109)),
])
def test_the_config_user_as_runc_resolves_it(image_root: Path, user: str | None, uid: int,
                                             gids: tuple[int, ...]) -> None:
    who = worker_identity(str(image_root), ImageConfig(user=user))
    assert (who.uid, who.gids) == (uid, gids)


@pytest.mark.parametrize("user", ["nobody-here", "app:nogroup"])
def test_a_user_the_image_lacks_cannot_start(image_root: Path, user: str) -> None:
    with pytest.raises(TargetError, match="cannot start"):
        worker_identity(str(image_root), ImageConfig(user=user))


def test_a_bundles_numeric_user_and_additional_groups(image_root: Path) -> None:
    who = worker_identity(str(image_root), ImageConfig(user="1000:1000", groups=[44]))
    assert (who.uid, who.gids) == (1000, (1000, 44))


# ------------------------------------------------------------------- the check, end to end

NIXL = ("--", "--moe-a2a-backend", "nixl")


def _bundle(where: Path, uid: int | None) -> Path:
    """A `umoci unpack` bundle of a venv image holding torch and nixl, whose config.json
    runs the worker as ``uid`` (None: no user given: root)."""
    site = venv_root(where / "rootfs")
    torch_image(site)
    add_nixl(site)
    (where / "rootfs/etc").mkdir(parents=True, exist_ok=True)
    (where / "rootfs/etc/passwd").write_text(PASSWD)
    (where / "rootfs/etc/group").write_text(GROUP)
    process: dict[str, object] = {
        "args": ["/opt/venv/bin/python", "-m", "sglang.launch_server"],
        "env": ["PATH=/opt/venv/bin:/usr/bin:/bin"], "cwd": "/"}
    if uid is not None:
        process["user"] = {"uid": uid, "gid": uid}
    (where / "config.json").write_text(json.dumps({"ociVersion": "1.0.2",
                                                   "root": {"path": "rootfs"},
                                                   "process": process}))
    return where


def _run_bundle(bundle: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--rootfs", str(bundle),
                           "--no-deep", *NIXL], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return Run(proc)


@needs_gcc
@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_a_loader_file_the_images_user_cannot_read(tmp_path: Path, mode: int) -> None:
    """The backend's ``__init__.py`` (root's, ``mode``) in an image whose worker runs as
    uid 1000: `import nixl_ep` raises PermissionError there, so the check fails it with the
    lines that put the file back (pip writes it 0644), though root reads it. Controls: the
    same image run as root, and the file 0644."""
    init = Path("rootfs/opt/venv/lib") / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    init = init / "site-packages/nixl_ep_cu13/__init__.py"
    bundle = _bundle(tmp_path / "user", 1000)
    (bundle / init).chmod(mode)
    r = _run_bundle(bundle)
    line = r.line("nixl_ep")
    assert r.rc == 1 and line.startswith("fail"), r.out + r.err
    assert ("/nixl_ep_cu13/__init__.py is not readable by the worker's user (the image "
            "config's User '1000:1000' (uid 1000, gids 1000)): the import raises "
            "PermissionError") in line, line
    assert r.fixes()[0].startswith("fix: rm /opt/venv/lib/"), r.out
    assert r.fixes()[0].endswith("pip install --force-reinstall --no-deps 'nixl-cu13==1.5.1'")
    root = _bundle(tmp_path / "root", None)
    (root / init).chmod(mode)
    assert _run_bundle(root).line("nixl_ep").startswith("pass")
    (bundle / init).chmod(0o644)
    assert _run_bundle(bundle).line("nixl_ep").startswith("pass")


@needs_gcc
def test_a_build_the_images_user_cannot_read(tmp_path: Path) -> None:
    """The build the loader picks, 0600 root's: the dlopen fails for uid 1000."""
    bundle = _bundle(tmp_path / "b", 1000)
    build = next((bundle / "rootfs/opt/venv").rglob("nixl_ep_cpp_torch214*.so"))
    build.chmod(0o600)
    r = _run_bundle(bundle)
    line = r.line("nixl_ep")
    assert r.rc == 1 and line.startswith("fail"), r.out + r.err
    assert (f"{build.name} is not readable by the worker's user" in line
            and "cannot open shared object file: Permission denied" in line), line


@as_root
@needs_gcc
def test_a_live_check_as_the_workers_own_user(open_tmp: Path) -> None:
    """Checked live, the worker's user is the check's own: run as an unprivileged user, a
    loader file only root can read fails (it said "not judged", exit 0)."""
    python = nobody_python()
    site = torch_image(open_tmp / "site")
    add_nixl(site)
    open_to_all(site)
    init = site / "nixl_ep_cu13" / "__init__.py"

    def check() -> Run:
        return check_as_nobody(python, site, *NIXL, home=open_tmp / "home")

    assert check().line("nixl_ep").startswith("pass")  # control
    init.chmod(0o600)
    r = check()
    line = r.line("nixl_ep")
    assert r.rc == 1 and line.startswith("fail"), r.out + r.err
    assert f"{init} is not readable by this process's user (uid {NOBODY})" in line, line
    assert "pip install --force-reinstall --no-deps 'nixl-cu13==1.5.1'" in r.fixes()[0]


@as_root
@needs_gcc
@pytest.mark.parametrize("owner", [0, 1000])
def test_an_image_file_whose_user_cannot_read_a_loader_file(tmp_path: Path,
                                                           owner: int) -> None:
    """``--image`` of an OCI layout (umoci) whose config says ``User app``: the image's
    ``/etc/passwd`` names it uid 1000, the unpacked files keep their layer's owner, so a
    loader file 0600 of root's fails and the same file 0600 of app's loads."""
    umoci = shutil.which("umoci")
    if umoci is None:
        pytest.skip("umoci is not installed")
    from tests.preflight.test_check_rootfs import debian_root

    root = tmp_path / "rootfs"
    site = debian_root(root)
    torch_image(site)
    add_nixl(site)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/passwd").write_text(PASSWD)
    (root / "etc/group").write_text(GROUP)
    init = site / "nixl_ep_cu13" / "__init__.py"
    init.chmod(0o600)
    os.chown(init, owner, owner)
    layout = tmp_path / "oci"
    for argv in (["init", "--layout", str(layout)], ["new", "--image", f"{layout}:t"],
                 ["insert", "--image", f"{layout}:t", str(root), "/"],
                 ["config", "--image", f"{layout}:t", "--config.user", "app"]):
        subprocess.run([umoci, *argv], check=True, timeout=120, capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--image", str(layout),
                           "--no-deep", *NIXL], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    line = Run(proc).line("nixl_ep")
    if owner == 0:
        assert proc.returncode == 1 and line.startswith("fail"), proc.stdout + proc.stderr
        assert ("nixl_ep_cu13/__init__.py is not readable by the worker's user (the image "
                "config's User 'app' (uid 1000, gids 1000, 44, 109))") in line, line
    else:
        assert line.startswith("pass"), proc.stdout + proc.stderr


# ----------------------------- mooncake's own path and the folders, as the importer reads them

def _moon_bundle(where: Path, uid: int | None) -> tuple[Path, Path]:
    """A `umoci unpack` bundle of a venv image holding torch, SGLang and mooncake (its
    prebuilt process-group builds), whose config runs the worker as ``uid``; (bundle, site)."""
    from tests.lib.images import healthy_image

    site = healthy_image(venv_root(where / "rootfs"))
    (where / "rootfs/etc").mkdir(parents=True, exist_ok=True)
    (where / "rootfs/etc/passwd").write_text(PASSWD)
    (where / "rootfs/etc/group").write_text(GROUP)
    process: dict[str, object] = {"args": ["/opt/venv/bin/python"], "cwd": "/",
                                  "env": ["PATH=/opt/venv/bin:/usr/bin:/bin"]}
    if uid is not None:
        process["user"] = {"uid": uid, "gid": uid}
    (where / "config.json").write_text(json.dumps({"ociVersion": "1.0.2",
                                                   "root": {"path": "rootfs"},
                                                   "process": process}))
    return where, site


def _run_moon(bundle: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if k != "MOONPIN_KB"}
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--rootfs", str(bundle),
                           "--no-deep", "--elastic-ep-backend", "mooncake"], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return Run(proc)


def _pg_build(site: Path) -> Path:
    return next(p for p in (site / "mooncake").iterdir() if p.name.startswith("pg_2_13_0."))


@pytest.mark.parametrize(("what", "mode", "says", "fix"), [
    ("loader", 0o600, "mooncake/pg.py is not readable by the worker's user",
     "pip install --force-reinstall --no-deps"),
    ("build", 0o600, "is not readable by the worker's user", "pip install --force-reinstall"),
    ("package", 0o751, "mooncake cannot be listed by the worker's user", "chmod -R a+rX "
     "/opt/venv/lib/python"),
    ("package", 0o744, "mooncake cannot be listed by the worker's user", "chmod -R a+rX "
     "/opt/venv/lib/python"),
])
def test_mooncakes_own_path_as_the_images_user_reaches_it(tmp_path: Path, what: str,
                                                          mode: int, says: str,
                                                          fix: str) -> None:
    """mooncake's own files (its loader ``pg.py``, the build it picks) and its package
    folder, root's, in an image whose worker runs as uid 1000: a file it cannot read fails
    the import (PermissionError; the build's dlopen), a folder it cannot list (no ``r``:
    CPython's FileFinder takes the listing's PermissionError as an empty folder) or search
    (no ``x``) makes ``import mooncake.pg`` a ModuleNotFoundError. moonpin judged only the
    other extensions' files, and said these usable. Controls: the image run as root, and
    the modes pip writes."""
    bundle, site = _moon_bundle(tmp_path / "user", 1000)
    target = {"loader": site / "mooncake" / "pg.py", "build": _pg_build(site),
              "package": site / "mooncake"}[what]
    assert _run_moon(bundle).rc == 0  # control: pip's modes
    target.chmod(mode)
    r = _run_moon(bundle)
    line = next((x for x in r.out.splitlines() if x.startswith("fail")), "")
    assert r.rc == 1 and line.startswith(f"fail  {'build' if what == 'build' else 'pg module'}:"
                                         ), r.out + r.err
    assert says in line, line
    assert fix in r.fixes()[0], r.out
    root, rsite = _moon_bundle(tmp_path / "root", None)
    {"loader": rsite / "mooncake" / "pg.py", "build": _pg_build(rsite),
     "package": rsite / "mooncake"}[what].chmod(mode)
    assert _run_moon(root).rc == 0


@needs_gcc
@pytest.mark.parametrize("mode", [0o751, 0o744])
def test_a_folder_the_images_user_cannot_list_or_search(tmp_path: Path, mode: int) -> None:
    """The nixl backend's package folder (``nixl_ep_cu13/``) 0751 (no ``r`` for others: its
    ``__init__`` is found, but the importer cannot list the folder for the build it imports)
    or 0744 (no ``x``: nothing in it can be opened): the import fails as uid 1000, so the
    check fails it with a ``chmod`` line, though every file in it is 0644."""
    bundle = _bundle(tmp_path / "user", 1000)
    folder = next((bundle / "rootfs/opt/venv").rglob("nixl_ep_cu13"))
    folder.chmod(mode)
    r = _run_bundle(bundle)
    line = r.line("nixl_ep")
    assert r.rc == 1 and line.startswith("fail"), r.out + r.err
    assert "nixl_ep_cu13 is not listable by the worker's user" in line or (
        "is not readable by the worker's user" in line), line
    assert r.fixes()[0].startswith("fix: chmod a+rX /opt/venv/lib/") or "reinstall" in r.fixes()[0]
    folder.chmod(0o755)
    assert _run_bundle(bundle).line("nixl_ep").startswith("pass")


@pytest.mark.parametrize("pyc_mode", [0o644, 0o600])
def test_an_unreadable_source_whose_bytecode_cache_is_readable(tmp_path: Path,
                                                               pyc_mode: int) -> None:
    """``mooncake/pg.py`` 0600 root's beside its valid ``__pycache__`` bytecode (pip writes
    one at install): CPython's SourceLoader only stats the source and runs the cache, so
    uid 1000 imports it (seen on a hard-link copy of the real venv image with the real
    import); with the cache 0600 too it reads the source and raises PermissionError."""
    import py_compile

    bundle, site = _moon_bundle(tmp_path / "user", 1000)
    src = site / "mooncake" / "pg.py"
    py_compile.compile(str(src), doraise=True)  # timestamp-checked, as pip's compileall
    pyc = next((site / "mooncake" / "__pycache__").glob("pg.*.pyc"))
    src.chmod(0o600)
    pyc.chmod(pyc_mode)
    r = _run_moon(bundle)
    if pyc_mode == 0o644:
        assert r.rc == 0 and r.line("pg module").startswith("pass"), r.out + r.err
    else:
        assert r.rc == 1 and "pg.py is not readable by the worker's user" in r.out, r.out


@as_root
@pytest.mark.parametrize("mode", [0o755, 0o751, 0o744, 0o711, 0o700, 0o705])
def test_a_folders_modes_as_the_real_importer_reads_them(open_tmp: Path, mode: int) -> None:
    """``pkg/`` (root's, ``mode``) holding ``__init__.py`` and ``mod.py`` (0644): the real
    ``python -c "import pkg.mod"`` as an unprivileged user against what the check says
    (:func:`moonpin.preflight.extensions.astread.denied` on the files the import runs).
    Without ``r`` the listing FileFinder takes is empty (ModuleNotFoundError), without ``x``
    nothing in it can be stat-ed or opened."""
    from moonpin.preflight.extensions import astread

    python = nobody_python()
    site = open_tmp / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("X = 1\n")
    (site / "pkg" / "mod.py").write_text("Y = 2\n")
    open_to_all(site)
    (site / "pkg").chmod(mode)
    proc = as_nobody(python, "import pkg.mod", site, open_tmp)
    said = astread.denied([str(site / "pkg" / "__init__.py"), str(site / "pkg" / "mod.py")],
                          Identity(NOBODY, (NOBODY,), "nobody"), None)
    assert (proc.returncode == 0) is (said is None), (proc.stderr, said)


@as_root
@pytest.mark.parametrize("cache", ["valid", "unreadable", "stale", "none"])
def test_a_live_check_of_a_source_only_its_bytecode_cache_reads(open_tmp: Path,
                                                                cache: str) -> None:
    """Checked live as an unprivileged user: ``mooncake/__init__.py`` 0600 root's beside its
    ``__pycache__`` bytecode. CPython's ``SourceLoader.get_code`` only stats the source and
    runs a valid cache it can read, so the import works; with the cache unreadable, stale
    (the source's mtime moved) or absent it reads the source and raises PermissionError.
    The real ``import mooncake`` as that user decides each case; the import chain said
    "cannot be read as Python (ReadRefused)" for the valid cache."""
    import py_compile

    from tests.lib.images import healthy_image

    python = nobody_python()
    site = healthy_image(open_tmp / "site")
    open_to_all(site)
    src = site / "mooncake" / "__init__.py"
    if cache != "none":
        pyc = Path(py_compile.compile(str(src), doraise=True))  # timestamp, as pip's
        pyc.parent.chmod(0o755)
        pyc.chmod(0o600 if cache == "unreadable" else 0o644)
    if cache == "stale":
        st = src.stat()
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * 10**9))
    src.chmod(0o600)
    real = as_nobody(python, "import mooncake", site, open_tmp)
    assert (real.returncode == 0) is (cache == "valid"), real.stderr
    assert cache == "valid" or "PermissionError" in real.stderr, real.stderr
    r = check_as_nobody(python, site, "--elastic-ep-backend", "mooncake", "--no-cache",
                        home=open_tmp / "home")
    assert "Traceback" not in r.err, r.err
    assert "ReadRefused" not in r.out and "cannot be read" not in r.out, r.out
    if cache == "valid":
        assert r.rc == 0, r.out + r.err
    else:
        assert r.rc == 1 and "the import raises PermissionError" in r.out, r.out


@as_root
@needs_gcc
@pytest.mark.parametrize("cache", ["valid", "unreadable"])
def test_a_live_check_of_a_loader_only_its_bytecode_cache_reads(open_tmp: Path,
                                                                cache: str) -> None:
    """Checked live as an unprivileged user: nixl's backend ``__init__.py`` 0600 root's beside
    its valid bytecode cache. The real import runs the cache and goes on past that file (to
    the test's stub build, which is no Python module), so the check must not fail it as
    unreadable (it said "the import raises PermissionError"): what the loader picks is not
    read (not judged). With the cache unreadable too the import raises PermissionError."""
    import py_compile

    python = nobody_python()
    site = torch_image(open_tmp / "site")
    add_nixl(site)
    open_to_all(site)
    init = site / "nixl_ep_cu13" / "__init__.py"
    pyc = Path(py_compile.compile(str(init), doraise=True))
    pyc.parent.chmod(0o755)
    pyc.chmod(0o644 if cache == "valid" else 0o600)
    init.chmod(0o600)
    real = as_nobody(python, "import nixl_ep_cu13", site, open_tmp)
    assert ("PermissionError" in real.stderr) is (cache == "unreadable"), real.stderr
    r = check_as_nobody(python, site, *NIXL, home=open_tmp / "home")
    line = r.line("nixl_ep")
    if cache == "valid":
        assert "PermissionError" not in line and not line.startswith("fail"), line
    else:
        assert line.startswith("fail") and "the import raises PermissionError" in line, line
