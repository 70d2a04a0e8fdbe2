"""Hostile inputs of the light check, one class each: what the image says (versions, file
names, ``.pth`` lines, the Python sources of ``import mooncake.pg``'s chain) never ends in a
traceback, a hang, or a report line a terminal would act on. Each test failed before its fix;
the generic classes of the chain's files are also drawn, seeded, by
:mod:`tests.hostile.test_check_chain_files`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.lib.checkrun import Run, run, small_kb
from tests.lib.images import ext_suffix, healthy_image

#: What an escape sequence in an image's string does to a terminal: sets its title, clears
#: it, colours what follows.
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m"


def _no_escape(r: Run) -> None:
    for stream in (r.out, r.err):
        assert "\x1b" not in stream and "\x07" not in stream, stream[-800:]
        stream.encode("utf-8")  # no lone surrogate: the report prints in a UTF-8 locale


def _metadata(site: Path, dist: str, field: str, value: str) -> None:
    meta = next(site.glob(f"{dist}-*.dist-info")) / "METADATA"
    lines = [f"{field}: {value}" if line.startswith(f"{field}:") else line
             for line in meta.read_text().splitlines()]
    meta.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")


# ------------------------------------------------------------------- what the report prints
@pytest.mark.parametrize("where", ["torch metadata", "torch/version.py", "build file name",
                                   "loader target", "torch/version.py surrogate"])
def test_image_strings_are_printed_escaped(tmp_path: Path, where: str) -> None:
    # a torch METADATA Version with an escape sequence was printed as it is (the terminal's
    # title set, its screen cleared); a lone surrogate in a version failed the print
    site = healthy_image(tmp_path / "site")
    build = site / "mooncake" / f"pg_2_13_0{ext_suffix()}"
    if where == "torch metadata":
        _metadata(site, "torch", "Version", "2.13.0" + ESCAPES)
    elif where == "torch/version.py":
        (site / "torch" / "version.py").write_text(
            f"__version__ = {'2.13.0' + ESCAPES!r}\ncuda = '13.0'\n")
    elif where == "torch/version.py surrogate":
        (site / "torch" / "version.py").write_text(
            "__version__ = '2.13.0\\udc80'\ncuda = '13.0'\n")
    elif where == "build file name":
        build.rename(build.with_name(f"pg_2_13_0{ESCAPES}{ext_suffix()}"))
    else:
        pg = site / "mooncake" / "pg.py"
        pg.write_text(pg.read_text().replace('"mooncake.pg"',
                                             repr("mooncake.pg" + ESCAPES).replace("'", '"')))
    for extra in (["-q"], []):  # the full report last: it is the one read below
        r = run(site, *extra, kb=small_kb(tmp_path), env={"LANG": "C.UTF-8"})
        assert r.rc in (0, 1) and "Traceback" not in r.err, r.err
        _no_escape(r)
    if where not in ("torch/version.py", "torch/version.py surrogate"):
        assert r.rc == (1 if where != "torch metadata" else 0), r.out
        assert "\\x1b]0;owned\\x07" in r.out, r.out  # said, escaped


def test_stopped_check_errors_are_printed_escaped(tmp_path: Path) -> None:
    # exit 2 says its failure on stderr: the path quoted there is the user's, escaped too
    site = tmp_path / f"site{ESCAPES}"
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 2 and "tip:" in r.err, r.err
    _no_escape(r)


# ----------------------------------------------------------------- versions the image says
@pytest.mark.parametrize("change", ["torch metadata", "torch metadata pre-release",
                                    "sglang metadata"])
def test_versions_past_int_digit_limit(tmp_path: Path, change: str) -> None:
    # a torch METADATA Version of 100,000 digits was a traceback (packaging's int() of a
    # release segment past Python's 4,300-digit limit is a ValueError, not InvalidVersion)
    site = healthy_image(tmp_path / "site")
    if change == "torch metadata":
        _metadata(site, "torch", "Version", "9" * 100_000 + ".0")
    elif change == "torch metadata pre-release":  # and torch.__version__ is not a literal
        _metadata(site, "torch", "Version", "9" * 5000 + "a1")
        (site / "torch" / "version.py").write_text("__version__ = str(1)\ncuda = '13.0'\n")
    else:  # the fixer compares SGLang releases when no mooncake fits
        _metadata(site, "sglang", "Version", "9" * 5000 + "a1")
        (site / "mooncake" / f"pg_2_13_0{ext_suffix()}").unlink()
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc in (0, 1) and "Traceback" not in r.err, r.err[-1500:]
    assert r.lines[-1].startswith(("usable", "not usable")), r.out[-500:]


def test_torch_label_of_megabytes_is_not_printed(tmp_path: Path) -> None:
    # a 2 MB torch.__version__ followed through torch/__init__.py -> torch_version.py ->
    # version.py went into two report lines whole (4 MB of output); torch/version.py's own
    # rule for a label (printable, at most 256 characters) applies to the followed one too
    site = healthy_image(tmp_path / "site")
    (site / "torch" / "version.py").write_text(
        "__version__ = '2.13.0" + "a" * 2_000_000 + "'\ncuda = '13.0'\n")
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 0 and len(r.out) < 20_000, (r.rc, len(r.out), r.out[:1000])
    assert "torch label" in r.out, r.out


# ---------------------------------------------------------------- an image root's paths
def test_chroot_resolve_is_linear_in_components(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # a 1 MB `.pth` line of `usr/../` took seconds each (the walk popped the front of a
    # list and asked the kernel about every component again): 6 such files in an image
    # root took 47 s; a million components must take well under a second
    from moonpin.preflight.access import chroot

    (tmp_path / "usr").mkdir()
    asked: list[str] = []
    islink = os.path.islink
    monkeypatch.setattr(os.path, "islink", lambda p: asked.append(p) or islink(p))
    t = time.monotonic()
    assert chroot.resolve(str(tmp_path), "/usr/.." * 300_000 + "/usr") == f"{tmp_path}/usr"
    assert len(asked) <= 2, len(asked)
    got = chroot.resolve(str(tmp_path), "/x" * 1_000_000)
    assert got == str(tmp_path) + "/x" * 1_000_000
    assert time.monotonic() - t < 10


# ------------------------------------------------------------- the import chain's files
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-null", "directory"])
@pytest.mark.parametrize("module", ["mooncake/pg.py", "torch/version.py"])
def test_bytecode_cache_that_is_not_a_file(tmp_path: Path, kind: str, module: str) -> None:
    # `__pycache__/pg.cpython-3X.pyc` as a FIFO hung the check for ever (its header was
    # read with a plain open). CPython's importer reads it too, before it compiles the
    # source: a FIFO blocks the import, /dev/zero is read until memory runs out (the
    # worker never starts: a failure); /dev/null or a folder there is skipped, and the
    # source compiled
    import sys

    site = healthy_image(tmp_path / "site")
    source = site / module
    cache = source.parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    pyc = cache / f"{source.stem}.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc"
    if kind == "fifo":
        os.mkfifo(pyc)
    elif kind == "directory":
        pyc.mkdir()
    else:
        pyc.symlink_to("/dev/zero" if kind == "dev-zero" else "/dev/null")
    t = time.monotonic()
    for _ in ("cold", "warm"):
        r = run(site, kb=small_kb(tmp_path))
        assert "Traceback" not in r.err, r.err
        if kind in ("fifo", "dev-zero"):
            assert r.rc == 1, r.out
            assert "never ends: its bytecode cache __pycache__/" in r.out, r.out
        else:
            assert r.rc == 0, r.out
    assert time.monotonic() - t < 60
    if kind == "fifo" and module == "mooncake/pg.py":  # what the interpreter itself does
        import subprocess

        code = f"import sys; sys.path[:0] = [{str(site)!r}]; import mooncake.pg"
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                           timeout=3)


@pytest.mark.parametrize("module", ["mooncake/__init__.py", "mooncake/pg.py",
                                    "torch/__init__.py", "torch/torch_version.py",
                                    "torch/version.py"])
def test_sparse_source_of_a_gigabyte(tmp_path: Path, module: str) -> None:
    # a 1 GiB sparse file (all NUL bytes) in a module's place: past the reading budget
    # (mooncake/__init__.py) the check called the image usable; past the 16 MiB cap
    # (torch/version.py) it said the file "cannot be read" as if the import failed for
    # that. CPython refuses a source holding a NUL byte: the import certainly fails, and
    # the check says so from the file's head
    site = healthy_image(tmp_path / "site")
    (site / module).unlink()
    with open(site / module, "wb") as f:
        f.truncate(1 << 30)
    for _ in ("cold", "warm"):
        r = run(site, kb=small_kb(tmp_path))
        assert r.rc == 1, r.out
        assert "cannot contain null bytes" in r.out, r.out


@pytest.mark.parametrize("module", ["torch/__init__.py", "torch/torch_version.py",
                                    "torch/version.py", "mooncake/__init__.py"])
def test_valid_source_past_the_cap_is_not_a_failure(tmp_path: Path, module: str) -> None:
    # a 20 MB torch/version.py (a long comment) imports; the check said `import torch`
    # fails because moonpin reads at most 16 MiB of a source: its own limit, not the
    # importer's. Past it, the file is found and not followed (the label: unknown)
    site = healthy_image(tmp_path / "site")
    path = site / module
    path.write_text(path.read_text() + ("#" + "c" * 99 + "\n") * 200_000)
    r = run(site, kb=small_kb(tmp_path))
    assert r.rc == 0, r.out
    assert "cannot be read" not in r.out, r.out


# --------------------------------------------------- PEP 668 in an image root (--rootfs)
def _pep668_root(tmp_path: Path) -> tuple[Path, Path]:
    """A Debian-layout root whose torch metadata disagrees with torch/version.py: the check
    then prints a pip fix line (a warning); returns (root, its standard library folder)."""
    from tests.preflight.test_check_rootfs import PY, debian_root

    root = tmp_path / "root"
    site = debian_root(root)
    healthy_image(site)
    _metadata(site, "torch", "Version", "2.12.0")
    return root, root / f"usr/lib/python{PY}"


def _rootfs_fix(tmp_path: Path, root: Path) -> str:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--rootfs",
                           str(root), "--elastic-ep-backend", "mooncake", "--kb",
                           str(small_kb(tmp_path))], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MOONPIN_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return next(line for line in proc.stdout.splitlines() if "fix:" in line and "pip " in line)


def test_externally_managed_link_out_of_the_root(tmp_path: Path) -> None:
    # the image's EXTERNALLY-MANAGED as an absolute link to a file the image does not
    # hold (/etc/hostname, here a host file): os.path.isfile followed it on the host, and
    # the fix line got --break-system-packages for a pip that refuses nothing
    root, stdlib = _pep668_root(tmp_path)
    host = tmp_path / "host-only"
    host.write_text("[externally-managed]\n")
    (stdlib / "EXTERNALLY-MANAGED").symlink_to(host)
    assert "--break-system-packages" not in _rootfs_fix(tmp_path, root)
    (stdlib / "EXTERNALLY-MANAGED").unlink()  # the same link to a file inside the root
    (root / str(host).lstrip("/")).parent.mkdir(parents=True)
    (root / str(host).lstrip("/")).write_text("[externally-managed]\n")
    (stdlib / "EXTERNALLY-MANAGED").symlink_to(host)
    assert "--break-system-packages" in _rootfs_fix(tmp_path, root)


def test_pip_conf_loop_leaves_the_image_managed(tmp_path: Path) -> None:
    # /etc/pip.conf a symbolic link loop: pip reads no file there and still refuses to
    # install; the loop ended the whole decision, so the fix line lacked the flag pip needs
    root, stdlib = _pep668_root(tmp_path)
    (stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    (root / "etc").mkdir()
    (root / "etc/pip.conf").symlink_to("pip.conf")
    assert "--break-system-packages" in _rootfs_fix(tmp_path, root)


def test_bytecode_cache_linked_out_of_the_root(tmp_path: Path) -> None:
    # in an image root, mooncake's __pycache__/pg.cpython-3X.pyc as an absolute link to a
    # host FIFO: the check opened the host's file (and, before it read caches without
    # blocking, hung there). Inside the image the link names nothing: the source compiles
    import sys

    from tests.preflight.test_check_rootfs import debian_root

    root = tmp_path / "root"
    site = healthy_image(debian_root(root))
    cache = site / "mooncake" / "__pycache__"
    cache.mkdir()
    host_fifo = tmp_path / "host-fifo"
    os.mkfifo(host_fifo)
    (cache / f"pg.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc").symlink_to(host_fifo)
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--rootfs",
                           str(root), "--elastic-ep-backend", "mooncake", "--kb",
                           str(small_kb(tmp_path))], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MOONPIN_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------- --python's answer
def test_python_that_leaves_a_process_holding_the_pipes(tmp_path: Path) -> None:
    # an interpreter that answers and exits, leaving a process behind with its output
    # pipes (a .pth line's daemon): the check waited for their end until its 30 s timeout,
    # then said the interpreter could not be run, and left the process running
    import subprocess
    import sys

    marker = f"sleep 300.{os.getpid()}{time.monotonic_ns() % 100_000}"  # this test's own
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\n{marker} &\nexec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--python",
                           str(python), "--elastic-ep-backend", "mooncake", "--no-deep"],
                          capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MOONPIN_CACHE_DIR": str(tmp_path)})
    took = time.monotonic() - t
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    for pid in left:  # this test's own, should the check have left it
        os.kill(int(pid), 9)
    assert "target: python" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    assert took < 20, took
    assert not left, f"left running: {left}"


# ------------------------------------------------------------ an image file's config
def _image_with(tmp_path: Path, config: dict[str, object]) -> Path:
    """An OCI layout of one layer: a Debian-layout root with the healthy fake image."""
    import gzip
    import io
    import json
    import tarfile

    from tests.hostile.test_image_files import layout
    from tests.preflight.test_check_rootfs import debian_root

    root = tmp_path / "rootfs"
    healthy_image(debian_root(root))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for p in sorted(root.rglob("*")):
            tf.add(p, arcname=str(p.relative_to(root)), recursive=False)
    doc = {"os": "linux", "architecture": "amd64", "config": config,
           "rootfs": {"type": "layers", "diff_ids": []}}
    return layout(tmp_path / "img", [gzip.compress(buf.getvalue(), 1)],
                  config=json.dumps(doc).encode())


@pytest.mark.parametrize("field", ["PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "Entrypoint"])
def test_image_config_string_past_what_execve_passes(tmp_path: Path, field: str) -> None:
    # a config Env PATH of 2,200,000 folders (16 MB, under the 16 MiB a config may have)
    # cost 31 s of looking for python3 in each, LD_LIBRARY_PATH 44 s; no container runs
    # such an image: execve(2) refuses a string past MAX_ARG_STRLEN (128 KiB) with E2BIG
    import subprocess
    import sys

    many = ":".join("/" + format(i, "x") for i in range(2_200_000))
    config: dict[str, object] = {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]}
    if field == "Entrypoint":
        config["Entrypoint"] = ["/usr/bin/python3", "-c", "x" * 200_000]
    else:
        config["Env"] = ([] if field == "PATH" else ["PATH=/usr/bin"]) + [
            f"{field}={many}:/usr/bin"]
    img = _image_with(tmp_path, config)
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--image", str(img),
                           "--elastic-ep-backend", "mooncake", "--kb",
                           str(small_kb(tmp_path))], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MOONPIN_CACHE_DIR": str(tmp_path),
                                            "TMPDIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout[-800:] + proc.stderr[-800:]
    assert "MAX_ARG_STRLEN" in proc.stderr and "tip: rebuild the image" in proc.stderr
    assert time.monotonic() - t < 20
    ok = _image_with(tmp_path / "ok", {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin",
                                               "PYTHONPATH=" + "/x" * 60_000]})
    proc = subprocess.run([sys.executable, "-m", "moonpin.preflight", "--image", str(ok),
                           "--elastic-ep-backend", "mooncake", "--kb",
                           str(small_kb(tmp_path))], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "MOONPIN_CACHE_DIR": str(tmp_path),
                                            "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-800:] + proc.stderr[-800:]  # 120 KB: runs
