"""mooncake 0.3.14's ``mooncake.pg`` compiles its adapter at first import unless one is in
the cache folder its source names (``MOONCAKE_PG_JIT_DIR``, else ``Path.home()/.cache/
mooncake/pg_jit``): the folder of the judged worker, not of the checking process. For
``--rootfs``/``--image`` that is the image's configured ``Env`` and its user's home under its
root (runc sets ``HOME`` from the image's ``/etc/passwd`` when the ``Env`` has none), and an
adapter's ``DT_RUNPATH`` is a path of the image; for ``--python`` and ``--site-packages``
(this machine) it is this process's environment, which is the worker's. Before: the host's
folder judged every image, wrong both ways."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from moonpin.preflight.env.rootfs import ImageConfig
from moonpin.preflight.run import check_image
from tests.lib.checkrun import fake_python, run, run_check, small_kb
from tests.lib.elfbuild import build_so
from tests.lib.images import (
    CACHED_JIT_LOADER,
    KEYED_JIT_LOADER,
    PG_NAMES,
    add_mooncake,
    add_sglang,
    add_torch,
    jit_key,
    jit_site,
)
from tests.preflight.test_check_rootfs import PY, venv_root

IMAGE_PKG = f"/opt/venv/lib/python{PY}/site-packages/mooncake"
KEY = "79d8800e818b37ff7753"


def _jit_root(root: Path) -> Path:
    """An image root with mooncake 0.3.14's compiling loader in ``/opt/venv`` and neither
    ninja nor nvcc: its import works only from a compiled adapter."""
    site = venv_root(root)
    add_torch(site)
    add_sglang(site)
    add_mooncake(site, version="0.3.14", jit=True)
    (site / "mooncake" / "pg.py").write_text(CACHED_JIT_LOADER)
    (site / "mooncake" / "libmooncake_pg.so").write_bytes(build_so(needed=[], strings=[]))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n"
                                         "worker:x:1000:1000::/home/worker:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\nworker:x:1000:\n")
    return site


def _adapter(cache: Path, runpath: str, key: str = KEY) -> Path:
    """A compiled adapter stand-in as the loader leaves it: ``<cache>/<key>/
    _mooncake_pg_jit_cuda.so`` linking the mooncake folder it was compiled for."""
    folder = cache / key
    folder.mkdir(parents=True, exist_ok=True)
    so = folder / "_mooncake_pg_jit_cuda.so"
    so.write_bytes(build_so(needed=["libmooncake_pg.so"], runpath=runpath,
                            strings=[*PG_NAMES, "mooncake", "mooncake-cpu"]))
    return so


def _line(root: Path, kb: Path, env: list[str], user: str | None = None) -> str:
    """The adapter or toolchain line of ``check --rootfs`` of ``root`` with the config
    ``Env`` ``env`` and ``User`` ``user``."""
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin", *env], user=user)
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg, kb_path=kb,
                      deep=False, source_cache=False)
    got = [c for c in rep.checks if c.name in ("adapter", "toolchain")]
    assert len(got) == 1, [(c.name, c.status, c.message) for c in rep.checks]
    return f"{got[0].status} {got[0].message}"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's own cache folder and home, which no image check may read."""
    cache = tmp_path / "host-cache"
    cache.mkdir()
    monkeypatch.setenv("MOONCAKE_PG_JIT_DIR", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "host-home"))
    return cache


def test_the_images_env_names_its_cache_folder(tmp_path: Path, host: Path) -> None:
    root = tmp_path / "root"
    _jit_root(root)
    kb = small_kb(tmp_path)
    env = ["MOONCAKE_PG_JIT_DIR=/var/cache/pg_jit"]
    line = _line(root, kb, env)
    assert line.startswith("fail") and "(looked in /var/cache/pg_jit)" in line, line
    assert str(host) not in line
    _adapter(root / "var/cache/pg_jit", f"{IMAGE_PKG}:/opt/venv/lib/torch/lib")
    line = _line(root, kb, env)
    assert line.startswith("pass") and f"/var/cache/pg_jit/{KEY}" in line, line
    # `~/` in the variable is the image user's home
    _adapter(root / "home/worker/jit", IMAGE_PKG)
    line = _line(root, kb, ["MOONCAKE_PG_JIT_DIR=~/jit"], user="worker")
    assert line.startswith("pass") and f"/home/worker/jit/{KEY}" in line, line


@pytest.mark.parametrize(("user", "env", "home"), [
    (None, [], "/root"),                      # no User: root, its passwd home
    ("worker", [], "/home/worker"),           # a name: its passwd home
    ("1000:1000", [], "/home/worker"),        # a number: the entry of that uid
    ("4242", [], ""),                         # a uid passwd does not have: runc's "/"
    ("worker", ["HOME=/srv/h"], "/srv/h"),    # HOME in the Env wins over passwd
])
def test_the_images_user_home_holds_the_cache(tmp_path: Path, host: Path, user: str | None,
                                              env: list[str], home: str) -> None:
    root = tmp_path / "root"
    _jit_root(root)
    kb = small_kb(tmp_path)
    cache = f"{home}/.cache/mooncake/pg_jit"
    line = _line(root, kb, env, user)
    assert line.startswith("fail") and f"(looked in {cache})" in line, line
    _adapter(root / cache.lstrip("/"), IMAGE_PKG)
    line = _line(root, kb, env, user)
    assert line.startswith("pass") and f"{cache}/{KEY}" in line, line


def test_the_hosts_cache_never_passes_an_image(tmp_path: Path, host: Path) -> None:
    """An adapter in this process's cache folder, compiled for this very image (its
    RUNPATH names the mooncake folder both as the image's path and as the host's path of
    it), does not make the image's worker start: it has no such adapter (was: pass)."""
    root = tmp_path / "root"
    site = _jit_root(root)
    kb = small_kb(tmp_path)
    _adapter(host, f"{site / 'mooncake'}:{IMAGE_PKG}")
    _adapter(tmp_path / "host-home/.cache/mooncake/pg_jit", f"{site / 'mooncake'}")
    line = _line(root, kb, [])
    assert line.startswith("fail") and "needs ninja" in line, line
    assert "(looked in /root/.cache/mooncake/pg_jit)" in line, line


def test_an_adapter_of_the_hosts_path_in_the_image_is_not_its_own(tmp_path: Path,
                                                                   host: Path) -> None:
    """In the image's own folder, an adapter whose RUNPATH names the host path of the
    image's mooncake folder (compiled outside the image) or another image's folder is not
    one the image's loader compiled for itself."""
    root = tmp_path / "root"
    site = _jit_root(root)
    kb = small_kb(tmp_path)
    cache = root / "root/.cache/mooncake/pg_jit"
    _adapter(cache, f"{site / 'mooncake'}", key="a" * 20)
    _adapter(cache, "/opt/other/lib/mooncake", key="b" * 20)
    assert _line(root, kb, []).startswith("fail")
    _adapter(cache, IMAGE_PKG, key="c" * 20)
    assert _line(root, kb, []).startswith("pass")


def test_links_in_the_image_stay_in_it(tmp_path: Path, host: Path) -> None:
    """Links are followed as the image's kernel would: an absolute one restarts at the
    image's root (one naming a host folder that holds an adapter finds nothing), one within
    the image is followed; a FIFO where the adapter should be is no adapter, read
    without blocking."""
    root = tmp_path / "root"
    _jit_root(root)
    kb = small_kb(tmp_path)
    outside = tmp_path / "outside"
    _adapter(outside, IMAGE_PKG)
    env = ["MOONCAKE_PG_JIT_DIR=/cache"]
    (root / "cache").symlink_to(outside)  # the host's folder, by an absolute link
    assert _line(root, kb, env).startswith("fail")
    (root / "cache").unlink()
    (root / "cache").mkdir()
    (root / "cache" / KEY).symlink_to(outside / KEY)  # a key folder linking out
    assert _line(root, kb, env).startswith("fail")
    (root / "cache" / KEY).unlink()
    (root / "cache" / KEY).mkdir()
    (root / "cache" / KEY / "_mooncake_pg_jit_cuda.so").symlink_to(
        outside / KEY / "_mooncake_pg_jit_cuda.so")  # the file linking out
    assert _line(root, kb, env).startswith("fail")
    (root / "cache" / KEY / "_mooncake_pg_jit_cuda.so").unlink()
    os.mkfifo(root / "cache" / KEY / "_mooncake_pg_jit_cuda.so")
    assert _line(root, kb, env).startswith("fail")
    # a loop of links: nothing found, no error
    (root / "cache" / KEY / "_mooncake_pg_jit_cuda.so").unlink()
    (root / "cache" / KEY / "_mooncake_pg_jit_cuda.so").symlink_to("/loop")
    (root / "loop").symlink_to("/cache/" + KEY + "/_mooncake_pg_jit_cuda.so")
    assert _line(root, kb, env).startswith("fail")
    # control: a link within the image (absolute, as the image names it) is followed
    (root / "cache").rename(root / "old")
    _adapter(root / "data/jit", IMAGE_PKG)
    (root / "cache").symlink_to("/data/jit")
    line = _line(root, kb, env)
    assert line.startswith("pass") and "/data/jit/" in line, line


def test_python_uses_this_process_env_and_home(tmp_path: Path) -> None:
    """``--python``: the worker runs the check, so this process's variable and home are
    the worker's (the image is this machine)."""
    site = jit_site(tmp_path)
    python = fake_python(tmp_path / "env" / "bin" / "python", site, sys.version_info[1])
    bare = tmp_path / "bin"
    bare.mkdir()
    kb = small_kb(tmp_path)
    home = tmp_path / "home"
    env = {"PATH": str(bare), "MOONPIN_CHECK_CUDA_FALLBACK": str(tmp_path / "nocuda"),
           "CUDA_HOME": "", "TORCH_CUDA_ARCH_LIST": "9.0", "HOME": str(home),
           "MOONCAKE_PG_JIT_DIR": "", "MOONPIN_KB": str(kb)}

    def line(extra: dict[str, str]) -> str:
        r = run_check("--python", str(python), "--kb", str(kb), env={**env, **extra})
        got = [ln for ln in r.stdout.splitlines() if ln[6:].startswith(("adapter:",
                                                                        "toolchain:"))]
        assert len(got) == 1, r.stdout + r.stderr
        return got[0]

    cache = home / ".cache/mooncake/pg_jit"
    assert line({}).startswith("fail") and f"(looked in {cache})" in line({})
    _adapter(cache, str(site / "mooncake"))
    assert line({}).startswith("pass"), line({})
    other = tmp_path / "jit"
    other.mkdir()
    assert line({"MOONCAKE_PG_JIT_DIR": str(other)}).startswith("fail")
    _adapter(other, str(site / "mooncake"))
    got = line({"MOONCAKE_PG_JIT_DIR": str(other)})
    assert got.startswith("pass") and str(other) in got, got


def test_an_image_file_carries_its_adapter_and_tools(tmp_path: Path) -> None:
    """``--image``: the image's cache folder (its ``Env``) and toolchain are unpacked with
    what the check reads, so an adapter the image ships is seen, and ninja on its PATH is
    found (the partial unpack kept neither)."""
    import shutil
    import subprocess

    umoci = shutil.which("umoci")
    if umoci is None:
        pytest.skip("umoci is not installed")
    root = tmp_path / "rootfs"
    _jit_root(root)
    ninja = root / "opt/venv/bin/ninja"
    ninja.write_bytes(b"\x7fELF stand-in")
    ninja.chmod(0o755)
    kb = small_kb(tmp_path)

    def line(with_adapter: bool) -> str:
        layout = tmp_path / f"oci-{with_adapter}"
        if with_adapter:
            _adapter(root / "var/jit", IMAGE_PKG)
        for argv in (["init", "--layout", str(layout)], ["new", "--image", f"{layout}:t"],
                     ["insert", "--image", f"{layout}:t", str(root), "/"],
                     ["config", "--image", f"{layout}:t", "--config.env",
                      "PATH=/opt/venv/bin:/usr/bin:/bin", "--config.env",
                      "MOONCAKE_PG_JIT_DIR=/var/jit", "--config.entrypoint",
                      "/opt/venv/bin/python"]):
            subprocess.run([umoci, *argv], check=True, capture_output=True, timeout=120)
        r = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--image", str(layout),
                            "--elastic-ep-backend", "mooncake", "--kb", str(kb)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "MOONCAKE_PG_JIT_DIR": str(tmp_path / "h")})
        got = [ln for ln in r.stdout.splitlines() if ln[6:].startswith(("adapter:",
                                                                        "toolchain:"))]
        assert len(got) == 1, r.stdout + r.stderr
        return got[0]

    cold = line(False)
    assert cold.startswith("fail") and "(looked in /var/jit)" in cold, cold
    assert "it needs nvcc" in cold and "ninja" not in cold.partition("needs")[2], cold
    warm = line(True)
    assert warm.startswith("pass") and f"/var/jit/{KEY}" in warm, warm


def test_a_root_named_through_a_link(tmp_path: Path, host: Path) -> None:
    """``--rootfs`` named by a symbolic link to the root: the adapter is still this
    image's (the package's path and the root compared in one spelling)."""
    root = tmp_path / "root"
    _jit_root(root)
    _adapter(root / "root/.cache/mooncake/pg_jit", IMAGE_PKG)
    (tmp_path / "via").symlink_to(root)
    line = _line(tmp_path / "via", small_kb(tmp_path), [])
    assert line.startswith("pass"), line


# --- the key folder mooncake computes -------------------------------------------------------
# mooncake 0.3.14's pg.py caches its adapter under `<cache>/<_cache_key(...)>/` and looks in
# no other folder: an adapter left by another torch (another key) is not taken, it compiles
# anew (real: the packed stack's adapter in a cache of stack-torch215, under /opt/venv in a
# private mount namespace: ImportError "requires a CUDA toolkit with nvcc", and the folder it
# made is another key). The check computes the same key from the files.

def _keyed_root(root: Path, label: str = "2.13.0") -> Path:
    site = _jit_root(root)
    (site / "mooncake" / "pg.py").write_text(KEYED_JIT_LOADER)
    (site / "mooncake" / "_pg_jit" / "pg.h").write_text("// a header\n")
    torch = site / "torch"
    (torch / "version.py").write_text(
        f"__version__ = '{label}'\ncuda = '13.0'\ngit_version = 'abc123'\n")
    with (torch / "__init__.py").open("a") as f:
        f.write("\n\ndef compiled_with_cxx11_abi() -> bool:\n    \"\"\"ABI.\"\"\"\n"
                "    return True\n\n\nx = 1\n")
    return site


def _key(site: Path, label: str = "2.13.0", core: str = f"{IMAGE_PKG}/libmooncake_pg.so"
         ) -> str:
    return jit_key(site / "mooncake", core, label, "13.0", "abc123",
                   f"cpython-{sys.version_info[0]}{sys.version_info[1]}")


def test_only_the_key_folder_the_loader_computes_is_taken(tmp_path: Path, host: Path) -> None:
    root = tmp_path / "root"
    site = _keyed_root(root)
    kb = small_kb(tmp_path)
    cache = root / "root/.cache/mooncake/pg_jit"
    key = _key(site)
    # compiled for this image's folder, but under another key (another torch): not taken
    # (was: pass, any key folder whose adapter's RUNPATH matched)
    _adapter(cache, IMAGE_PKG, key=_key(site, label="2.12.0"))
    line = _line(root, kb, [])
    assert line.startswith("fail") and "compiled for other inputs" in line, line
    assert f"computes the key {key}" in line, line
    _adapter(cache, IMAGE_PKG, key=key)
    line = _line(root, kb, [])
    assert line.startswith("pass") and f"pg_jit/{key}" in line, line
    # torch upgraded in place: the loader's key moves, the old adapter is left behind
    (site / "torch" / "version.py").write_text(
        "__version__ = '2.14.1'\ncuda = '13.0'\ngit_version = 'abc123'\n")
    line = _line(root, kb, [])
    assert line.startswith("fail") and f"computes the key {_key(site, '2.14.1')}" in line, line


def test_a_key_recipe_it_cannot_read_takes_any_key_folder(tmp_path: Path, host: Path) -> None:
    """A ``_cache_key`` hashing something this reading does not know: no key computed, the
    RUNPATH alone decides (as before), never a guessed key."""
    root = tmp_path / "root"
    site = _keyed_root(root)
    loader = site / "mooncake" / "pg.py"
    loader.write_text(loader.read_text().replace(
        "    digest.update(backend.encode())\n",
        "    digest.update(backend.encode())\n    digest.update(os.uname().release.encode())\n"))
    _adapter(root / "root/.cache/mooncake/pg_jit", IMAGE_PKG, key="d" * 20)
    line = _line(root, small_kb(tmp_path), [])
    assert line.startswith("pass") and "d" * 20 in line, line


def test_a_relative_cache_folder_is_the_working_folders(tmp_path: Path) -> None:
    """``MOONCAKE_PG_JIT_DIR=jit``: ``Path("jit")`` is resolved against the worker's working
    folder when the loader opens it; the check runs as the worker (``--python``), from its
    folder (was: not looked in)."""
    site = jit_site(tmp_path)
    python = fake_python(tmp_path / "env" / "bin" / "python", site, sys.version_info[1])
    bare = tmp_path / "bin"
    bare.mkdir()
    kb = small_kb(tmp_path)
    work = tmp_path / "work"
    _adapter(work / "jit", str(site / "mooncake"))
    env = {**os.environ, "PATH": str(bare), "MOONPIN_CHECK_CUDA_FALLBACK": str(tmp_path / "x"),
           "CUDA_HOME": "", "TORCH_CUDA_ARCH_LIST": "9.0", "HOME": str(tmp_path / "home"),
           "MOONCAKE_PG_JIT_DIR": "jit"}
    env.pop("MOONPIN_KB", None)
    env.pop("VIRTUAL_ENV", None)
    for cwd, status in ((work, "pass"), (tmp_path, "fail")):
        r = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--no-deep",
                            "--elastic-ep-backend", "mooncake", "--python", str(python),
                            "--kb", str(kb)], cwd=cwd, capture_output=True, text=True,
                           env=env, timeout=120)
        got = [ln for ln in r.stdout.splitlines() if ln[6:].startswith(("adapter:",
                                                                        "toolchain:"))]
        assert len(got) == 1 and got[0].startswith(status), r.stdout + r.stderr
        if status == "pass":
            assert str(work / "jit" / KEY) in got[0], got[0]


def test_the_key_is_the_one_mooncake_computes_for_the_real_venvs() -> None:
    """The key folders mooncake 0.3.14 made when its adapter was compiled in the real venvs
    (``stack.sh --mooncake-jit``: ``$MOONPIN_TEST_REALIMG/pg_jit/<key>``) are the keys the
    check computes for them."""
    base = Path(os.environ.get("MOONPIN_TEST_REALIMG", "/nonexistent"))
    made = {p.name for p in (base / "pg_jit").glob("*") if p.is_dir()}
    if not made:
        pytest.skip("no real venv with a compiled adapter (MOONPIN_TEST_REALIMG/pg_jit)")
    from moonpin.preflight.extensions.rules.mooncake_jit import cache_key
    from moonpin.preflight.installed.image_facts import torch_version_py

    got = set()
    for venv in sorted(base.glob("venv-jit*")):
        site = next(venv.glob("lib/python3.*/site-packages"))
        minor = int(site.parent.name.removeprefix("python3."))
        got.add(cache_key(str(site / "mooncake/pg.py"), str(site / "mooncake"),
                          str(site / "torch"), torch_version_py(str(site / "torch")), {},
                          (3, minor)))
    assert got and got <= made, (got, made)


@pytest.mark.parametrize(("workdir", "looked"), [(None, "/jit"), ("/srv/app", "/srv/app/jit")])
def test_a_relative_cache_folder_of_an_image_is_its_working_dirs(
        tmp_path: Path, host: Path, workdir: str | None, looked: str) -> None:
    """``MOONCAKE_PG_JIT_DIR=jit`` in an image's Env: its worker's working folder is the
    config's ``WorkingDir``, else ``/`` (runc); the folder is looked in there (was: none)."""
    root = tmp_path / "root"
    _jit_root(root)
    kb = small_kb(tmp_path)
    cfg = ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin", "MOONCAKE_PG_JIT_DIR=jit"],
                      working_dir=workdir)

    def line() -> str:
        rep = check_image(elastic_ep_backend="mooncake", rootfs=root, config=cfg, kb_path=kb,
                          deep=False, source_cache=False)
        got = [c for c in rep.checks if c.name in ("adapter", "toolchain")]
        assert len(got) == 1
        return f"{got[0].status} {got[0].message}"

    cold = line()
    assert cold.startswith("fail") and f"(looked in {looked})" in cold, cold
    _adapter(root / looked.lstrip("/"), IMAGE_PKG)
    warm = line()
    assert warm.startswith("pass") and f"{looked}/{KEY}" in warm, warm


def test_an_adapter_the_images_user_cannot_read_is_not_taken(tmp_path: Path,
                                                               host: Path) -> None:
    """The image's worker runs as its config's ``User`` (uid 65534 here): a cache folder
    only root may list (0700, root's) gives it nothing, so it compiles anew (was: pass,
    the check reading the folder as the user it runs as)."""
    if os.geteuid() != 0:
        pytest.skip("the folder must be root's, and the checker root (as an image's unpacker)")
    root = tmp_path / "root"
    _jit_root(root)
    kb = small_kb(tmp_path)
    cache = root / "srv/jit"
    so = _adapter(cache, IMAGE_PKG)
    env = ["MOONCAKE_PG_JIT_DIR=/srv/jit"]
    assert _line(root, kb, env, user="65534").startswith("pass")
    os.chmod(so.parent, 0o700)
    line = _line(root, kb, env, user="65534")
    assert line.startswith("fail") and "cannot be read by the worker's user" in line, line
    assert _line(root, kb, env).startswith("pass")  # root's own worker may
    os.chmod(so.parent, 0o755)
    os.chmod(so, 0o600)  # listed, but not readable: dlopen fails, it compiles
    assert _line(root, kb, env, user="65534").startswith("fail")


def test_a_5000_digit_number_in_the_key_recipe_is_no_key(tmp_path: Path, host: Path) -> None:
    """``hexdigest()[:<5,000 digits>]``: past CPython's integer-string limit the loader does
    not compile (the worker's import fails with SyntaxError, and the check says so); the
    key reading computes nothing and raises nothing."""
    from moonpin.preflight.extensions.rules.mooncake_jit import cache_key
    from moonpin.preflight.installed.image_facts import torch_version_py

    root = tmp_path / "root"
    site = _keyed_root(root)
    loader = site / "mooncake" / "pg.py"
    loader.write_text(loader.read_text().replace("hexdigest()[:20]",
                                                 "hexdigest()[:" + "9" * 5000 + "]"))
    assert cache_key(str(loader), str(site / "mooncake"), str(site / "torch"),
                     torch_version_py(str(site / "torch")), {}, (3, 11)) is None
    rep = check_image(elastic_ep_backend="mooncake", rootfs=root, kb_path=small_kb(tmp_path),
                      config=ImageConfig(env=["PATH=/opt/venv/bin:/usr/bin:/bin"]),
                      deep=False, source_cache=False)
    said = {c.name: (c.status, c.message) for c in rep.checks}
    assert said["loader"][0] == "fail" and "5000 digits" in said["loader"][1], said


@pytest.mark.parametrize("adapter", [False, True])
def test_a_compiling_loader_fails_with_torchs_import(tmp_path: Path, adapter: bool) -> None:
    """``import mooncake.pg`` of a loader that compiles at first import runs ``import torch``
    first and builds against it: when torch's import raises, so does mooncake's (real image:
    hunt-nonvshmem, ``libnvshmem_host.so.3`` gone). Was: the torch line failed, mooncake's
    lines passed (``cuda``, ``import chain``; the toolchain a warning, or the cached
    adapter a pass) and its verdict was ok."""
    site = jit_site(tmp_path)
    (site / "torch" / "lib" / "libc10.so").unlink()  # as libnvshmem_host.so.3 there
    cache = tmp_path / "pg_jit"
    if adapter:  # the one compiled for this image: reused only once torch imports
        _adapter(cache, f"{site / 'mooncake'}:{site / 'torch' / 'lib'}")
    env = {"PATH": str(tmp_path), "MOONPIN_CHECK_CUDA_FALLBACK": str(tmp_path / "nocuda"),
           "CUDA_HOME": "", "MOONCAKE_PG_JIT_DIR": str(cache), "TORCH_CUDA_ARCH_LIST": "9.0"}
    r = run(site, kb=small_kb(tmp_path), env=env)
    assert r.rc == 1 and r.status("torch") == "fail", r.out
    line = r.line("import chain")
    assert line.startswith("fail"), r.out
    assert "`import torch` raises ImportError: libc10.so: cannot open" in line
    assert "before its adapter is compiled against torch" in line, line
    assert not any(ln.split(None, 1)[-1].startswith(("adapter:", "toolchain:"))
                   for ln in r.lines), r.out
