#!/usr/bin/env python3
"""What importing each native extension an SGLang worker loads really does in one image.

Run it WITH THE IMAGE'S OWN INTERPRETER (``stack.sh`` does, with the stub driver on
``LD_LIBRARY_PATH`` and ``CUDA_VISIBLE_DEVICES=`` so that no GPU is visible on any host):

    <image>/bin/python tests/realimg/probe_stack.py > report.json
    python3 tests/realimg/probe_stack.py --summary report.json     # one line per module

Each import runs in a fresh child process with a timeout, so one import's side effects (a
half-loaded object, a registered backend) cannot colour the next. SGLang is never imported.

Probes (``probes`` in the report; each ``{"ok": bool, "error_type", "error", ...}``):
  torch            ``import torch`` (every extension imports it first)
  sgl_kernel       ``import sgl_kernel``; ``loaded`` names the ``common_ops`` file it chose.
                   Its ``load_utils._load_architecture_specific_ops`` takes ``sm90/`` when the
                   GPU's capability is exactly 90 and ``sm100/`` otherwise, also with no GPU
                   (``torch.cuda.is_available()`` false) -- the case every probe here forces.
  sgl_kernel@cc<NN> (only when named in ``$PROBE_ALSO``) ``import sgl_kernel`` with
                   ``torch.cuda`` answering a GPU of capability NN (``is_available``,
                   ``get_device_properties``), the whole import as that GPU would run it
  sgl_kernel@sm90  the other choice: ``sm90/common_ops.*`` loaded after ``import torch`` the way
                   ``_load_architecture_specific_ops`` loads it (a GPU of capability 9.0)
  nixl_ep          ``import nixl_ep``, then ``from nixl_ep import Buffer`` (what SGLang's
                   ``--moe-a2a-backend nixl`` dispatcher does); ``loaded`` names the build
  nixl_ep@deepbind the same with ``NIXL_UCX_DEEPBIND=1``: nixl's backend ``__init__`` then
                   dlopens its build with ``RTLD_DEEPBIND``; ``dlopen_flags`` records every
                   value it handed ``sys.setdlopenflags`` (seen through a wrapper), the proof
                   that the real load was a DEEPBIND one
  deep_ep          ``import deep_ep`` on a host that has a GPU: sgl-deep-ep's
                   ``check_prerequisites`` refuses to load when ``torch.cuda.is_available()``
                   is False, so this child runs with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` and the
                   stub NVML of ``make_libcuda_stub.sh`` (``$PROBE_NVML_STUB``, one device) first
                   on ``LD_LIBRARY_PATH``: torch then says a GPU is there and the import goes on
                   to load ``deep_ep._C`` (skipped when ``PROBE_NVML_STUB`` is unset)
  deep_ep@nogpu    ``import deep_ep`` as this host really is (no GPU)
  flashinfer       ``import flashinfer``; ``warnings`` holds the log records and Python
                   warnings it emitted at WARNING or above (a mismatched flashinfer-cubin is
                   ignored with a warning, not an error)
  mooncake.pg      ``import mooncake.pg`` where ``mooncake/pg.py`` exists
  mooncake.ep      ``import mooncake.ep`` where ``mooncake/ep.py`` exists (what SGLang up to
                   0.5.16 imports for ``--elastic-ep-backend mooncake``)
  import@<name>    (only for the names in ``$PROBE_PLAIN``) a plain ``import <name>``, no GPU;
                   ``loaded`` lists the compiled modules of that package it left loaded
  names@<backend>  (only with ``$PROBE_NAMES``) every ``from <extension> import <names>`` of the
                   installed SGLang's ``--moe-a2a-backend <backend>`` dispatcher module
                   (``srt/layers/moe/token_dispatcher/<backend>.py``, read with ``ast``), run
                   in order outside the ``try`` SGLang may wrap it in; ``statements`` holds each
                   one's outcome (deep_ep's as on a host with a GPU, as ``deep_ep`` is probed)
A module whose distribution is absent is still probed: "not installed" is an outcome too.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
import time

TIMEOUT = float(os.environ.get("PROBE_TIMEOUT", "600"))
DISTS = ("torch", "sglang", "sglang-kernel", "sgl-kernel", "sgl-deep-ep", "nixl", "nixl-cu12",
         "nixl-cu13", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
         "mooncake-transfer-engine-cuda13", "mooncake-transfer-engine", "apache-tvm-ffi",
         "triton", "nvidia-nccl-cu13", "nvidia-cudnn-cu13", "cuda-bindings", "cuda-toolkit")
PROBES = ("torch", "sgl_kernel", "sgl_kernel@sm90", "nixl_ep", "nixl_ep@deepbind", "deep_ep",
          "deep_ep@nogpu", "flashinfer", "mooncake.pg", "mooncake.ep")
#: more probes named in $PROBE_ALSO (comma-separated), e.g. ``sgl_kernel@cc80,sgl_kernel@cc120``:
#: ``sgl_kernel@cc<NN>`` is ``import sgl_kernel`` with torch.cuda answering a GPU of capability NN
ALSO = tuple(n for n in os.environ.get("PROBE_ALSO", "").split(",") if n)
#: packages probed by a plain ``import <name>`` (``import@<name>``; no GPU), named in
#: $PROBE_PLAIN (comma-separated): the truth for a package no loader rule reads
PLAIN = tuple(f"import@{n}" for n in os.environ.get("PROBE_PLAIN", "").split(",") if n)
#: run with torch told (through the stub NVML) that a GPU is there
GPU_PROBES = ("deep_ep", "names@deepep")
#: the packages whose names SGLang's dispatchers import (``names@<backend>``)
EXTENSIONS = ("nixl_ep", "deep_ep", "mooncake", "flashinfer", "sgl_kernel")
NAME_BACKENDS = ("nixl", "deepep", "mooncake", "flashinfer")


def _fail(out: dict, stage: str, e: BaseException) -> dict:
    out.update(ok=False, stage=stage, error_type=type(e).__name__, error=str(e))
    cause = e.__cause__ or e.__context__
    if cause is not None:
        out["cause"] = f"{type(cause).__name__}: {cause}"
    return out


def child(name: str) -> dict:
    """Runs in the child: one probe, its outcome as a dict."""
    import logging
    import warnings

    out: dict = {"module": name}
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(f"{record.name}: {record.getMessage()}")

    logging.getLogger().addHandler(Keep(logging.WARNING))
    warnings.simplefilter("always")
    caught = warnings.catch_warnings(record=True)
    wlist = caught.__enter__()
    t = time.monotonic()
    try:
        if name == "torch":
            import torch
            out.update(ok=True, version=torch.__version__, cuda=torch.version.cuda,
                       cuda_available=torch.cuda.is_available())
        elif name == "sgl_kernel":
            import sgl_kernel
            out.update(ok=True, loaded=getattr(sgl_kernel.common_ops, "__file__", None))
        elif name.startswith("sgl_kernel@cc"):
            # a GPU of capability NN, as sgl_kernel's loader asks it (torch.cuda's answers
            # replaced before the import; nothing of the GPU is used at import)
            import types

            import torch
            cc = int(name.removeprefix("sgl_kernel@cc"))
            torch.cuda.is_available = lambda: True
            torch.cuda.current_device = lambda: 0
            torch.cuda.get_device_properties = lambda d=None: types.SimpleNamespace(
                major=cc // 10, minor=cc % 10, name=f"capability {cc}")
            torch.cuda.get_device_capability = lambda d=None: (cc // 10, cc % 10)
            import sgl_kernel
            out.update(ok=True, loaded=getattr(sgl_kernel.common_ops, "__file__", None),
                       assumed=f"a GPU of capability {cc // 10}.{cc % 10}")
        elif name == "sgl_kernel@sm90":
            import importlib.util
            import pathlib

            import torch  # the loader runs after `import torch`
            spec = importlib.util.find_spec("sgl_kernel")
            if spec is None or not spec.submodule_search_locations:
                raise ModuleNotFoundError("No module named 'sgl_kernel'", name="sgl_kernel")
            d = pathlib.Path(next(iter(spec.submodule_search_locations))) / "sm90"
            files = sorted(str(p) for p in d.glob("common_ops.*"))
            if not files:
                raise ImportError(f"no common_ops.* in {d}")
            s = importlib.util.spec_from_file_location("common_ops", files[0])
            assert s is not None and s.loader is not None
            s.loader.exec_module(importlib.util.module_from_spec(s))
            out.update(ok=True, loaded=files[0])
        elif name in ("nixl_ep", "nixl_ep@deepbind"):
            if name == "nixl_ep@deepbind":
                flags: list[int] = []
                out["dlopen_flags"] = flags
                real_set = sys.setdlopenflags

                def recording(value: int) -> None:
                    flags.append(value)
                    real_set(value)

                sys.setdlopenflags = recording
            try:
                import nixl_ep
            except BaseException as e:
                return _fail(out, "import nixl_ep", e)
            try:
                from nixl_ep import Buffer  # noqa: F401
            except BaseException as e:
                return _fail(out, "from nixl_ep import Buffer", e)
            cpp = sys.modules.get(f"{nixl_ep.buffer.__name__.rsplit('.', 1)[0]}.nixl_ep_cpp")
            out.update(ok=True, backend=nixl_ep.buffer.__name__.rsplit(".", 1)[0],
                       loaded=getattr(cpp, "__file__", None))
        elif name in ("deep_ep", "deep_ep@nogpu"):
            import deep_ep  # noqa: F401  (the import is the probe)
            out.update(ok=True, loaded=getattr(sys.modules.get("deep_ep._C"), "__file__", None))
        elif name == "flashinfer":
            import flashinfer
            env = sys.modules.get("flashinfer.jit.env")
            out.update(ok=True, version=flashinfer.__version__,
                       cubin_dir=str(getattr(env, "FLASHINFER_CUBIN_DIR", "")) or None)
        elif name.startswith("names@"):
            out.update(ok=True, statements=[])
            for stmt in _dispatcher_imports(name.removeprefix("names@")):
                try:
                    exec(stmt, {})  # the statement SGLang's own file runs
                    out["statements"].append({"stmt": stmt, "ok": True})
                except BaseException as e:  # its outcome is the finding
                    if out["ok"]:
                        _fail(out, stmt, e)
                    out["statements"].append({"stmt": stmt, "ok": False,
                                              "error": f"{type(e).__name__}: {e}"})
        elif name.startswith("import@"):
            import importlib

            top = name.removeprefix("import@")
            importlib.import_module(top)
            out.update(ok=True, loaded=sorted(
                f for m, v in list(sys.modules.items())
                if (m == top or m.startswith(top + ".")) and isinstance(
                    f := getattr(v, "__file__", None), str) and f.endswith(".so")))
        elif name == "mooncake.ep":
            import mooncake.ep as ep
            backend = getattr(ep, "backend_module", None)
            out.update(ok=True, loaded=getattr(backend, "__file__", None))
        elif name == "mooncake.pg":
            import mooncake.pg as pg
            backend = getattr(pg, "backend_module", None)
            out.update(ok=True, loaded=getattr(backend, "__file__", None))
        else:
            raise SystemExit(f"unknown probe {name}")
    except BaseException as e:  # the outcome of an import, whatever it raises, is the finding
        _fail(out, f"import {name}", e)
    finally:
        out["seconds"] = round(time.monotonic() - t, 1)
        out["warnings"] = records + [f"{w.category.__name__}: {w.message}" for w in wlist
                                     if not issubclass(w.category, DeprecationWarning)]
    return out


def _dispatcher_imports(backend: str) -> list[str]:
    """``from <extension…> import a, b`` of the installed SGLang's dispatcher of ``backend``,
    read with ``ast`` (SGLang is not imported), in source order."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return []
    path = os.path.join(next(iter(spec.submodule_search_locations)), "srt", "layers", "moe",
                        "token_dispatcher", f"{backend}.py")
    if not os.path.isfile(path):
        return []
    with open(path, "rb") as f:
        tree = ast.parse(f.read())
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.split(".")[0] in EXTENSIONS):
            stmt = f"from {node.module} import {', '.join(a.name for a in node.names)}"
            out.append((node.lineno, stmt))
    return list(dict.fromkeys(s for _, s in sorted(out)))


def run(name: str, env: dict[str, str] | None = None) -> dict:
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name],
                           capture_output=True, text=True, cwd="/", timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return {"module": name, "ok": False, "stage": "timeout", "error_type": "Timeout",
                "error": f"no answer in {TIMEOUT:.0f} s"}
    lines = r.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"module": name, "ok": False, "stage": "child died", "rc": r.returncode,
                "error_type": "ChildDied", "error": f"exit {r.returncode}",
                "stderr_tail": r.stderr[-2000:]}


def files(sp: str) -> dict:
    """What the image holds, by name only: the builds each loader rule chooses among."""
    def ls(*parts: str) -> list[str] | None:
        d = os.path.join(sp, *parts)
        return sorted(os.listdir(d)) if os.path.isdir(d) else None
    out = {}
    for pkg in ("nixl_ep_cu13", "nixl_ep_cu12", "nixl_ep"):
        names = ls(pkg)
        if names is not None:
            out[pkg] = [n for n in names if n.startswith("nixl_ep_cpp")]
    for sub in ("", "sm90", "sm100"):
        names = ls("sgl_kernel", sub) if sub else ls("sgl_kernel")
        if names is not None:
            out["sgl_kernel/" + sub] = [n for n in names if n.endswith(".so")]
    names = ls("mooncake")
    if names is not None:
        out["mooncake"] = [n for n in names if n.endswith(".so") or n in ("pg.py", "ep.py")]
    return out


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        with open(sys.argv[2]) as f:
            r = json.load(f)
        name = os.path.basename(r["prefix"])
        for mod, p in r["probes"].items():
            if p.get("ok"):
                loaded = p.get("loaded") or []
                what = "ok" + "".join(f"  {os.path.relpath(f, r['site'])}" for f in (
                    [loaded] if isinstance(loaded, str) else loaded))
                what += f"  [{len(p['warnings'])} warning(s)]" if p.get("warnings") else ""
            else:
                msg = (p.get("error") or "").strip().splitlines()
                what = f"{p.get('error_type')}: {(msg[0] if msg else '')[:140]}"
            print(f"{name:16s} {mod:16s} {what}")
        return
    import sysconfig
    sp = sysconfig.get_paths()["purelib"]
    dists = {}
    for n in DISTS:
        try:
            dists[n] = md.version(n)
        except md.PackageNotFoundError:
            pass
    report = {
        "python": sys.version.split()[0],
        "prefix": sys.prefix,
        "site": sp,
        "env": {k: os.environ.get(k) for k in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
                                               "MOONCAKE_PG_JIT_DIR", "FLASHINFER_WORKSPACE_BASE",
                                               "TORCH_CUDA_ARCH_LIST", "NIXL_UCX_DEEPBIND",
                                               "PROBE_NVML_STUB")},
        "dists": dists,
        "files": files(sp),
        "probes": {},
    }
    names = tuple(f"names@{b}" for b in NAME_BACKENDS) if os.environ.get("PROBE_NAMES") else ()
    for name in PROBES + ALSO + PLAIN + names:
        if name.startswith("mooncake.") and not os.path.exists(
                os.path.join(sp, "mooncake", name.split(".")[1] + ".py")):
            continue
        env = None
        if name == "nixl_ep@deepbind":
            env = dict(os.environ, NIXL_UCX_DEEPBIND="1")
        if name in GPU_PROBES:
            nvml = os.environ.get("PROBE_NVML_STUB")
            if not nvml:
                continue
            ld = ":".join(filter(None, [nvml, os.environ.get("LD_LIBRARY_PATH")]))
            env = dict(os.environ, PYTORCH_NVML_BASED_CUDA_CHECK="1", LD_LIBRARY_PATH=ld)
            env.pop("CUDA_VISIBLE_DEVICES", None)   # torch counts NVML's devices through it
        report["probes"][name] = run(name, env)
        if env is not None:
            report["probes"][name]["assumed"] = "a GPU (PYTORCH_NVML_BASED_CUDA_CHECK=1, stub NVML)"
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
