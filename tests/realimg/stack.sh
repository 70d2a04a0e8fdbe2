#!/usr/bin/env bash
# Build the real worker images of issue 39 (every native extension an SGLang worker loads) from the
# package index's own wheels, under $REALIMG (default /tmp/realimg), and record what importing each
# extension really does in each of them. Idempotent: a step whose result is already there is
# skipped; rerunning costs seconds. See tests/realimg/README.md.
#
# usage: tests/realimg/stack.sh [--no-variants] [--only NAME] [--no-probe|--probe-only]
#                               [--mooncake-jit] [--rebuild-variants] [--kernel-hunt] [-h|--help]
#   --no-variants       the working image `stack` only
#   --only NAME         build (and probe) only variant NAME (e.g. torch215); the base is built first
#   --no-probe          build only; no import probes
#   --probe-only        build nothing; probe the images that exist, write $REALIMG/reports/stack*.json
#   --mooncake-jit      compile mooncake's torch adapter (JIT, ~3 min per image) into
#                       $REALIMG/stack-pgjit/<image> so `import mooncake.pg` can succeed; without it
#                       the probe records the cold-cache outcome; also the packed stack's own
#                       ($REALIMG/stack-oci-pgjit, compiled for /opt/venv; needs root)
#   --rebuild-variants  delete and re-clone every variant
#   --kernel-hunt       build and probe only the sgl_kernel/flashinfer classes below, as
#                       $R/hunt-<name> (about 3.5 GB of new files, 0.4 GB of wheels), from
#                       `stack` and `stack-cubin`; with --probe-only, probe them only
#   --hunt-nixl         also build (and probe) the hunt-* images of nixl and deep_ep (block below;
#                       tests/test_image_hunt_nixl.py): hard-link copies, about 2.5 GB of new files
#   --hunt-c            also build (and probe) the hunt-C-* images (block at the end;
#                       tests/test_image_hunt_c.py): hard-link copies, about 3.5 GB of new files
#   --hunt-g            only build (and probe) the hunt-G-* images (packages no loader rule of
#                       moonpin reads, from the index's wheels; tests/test_image_hunt_g.py):
#                       hard-link copies, about 1 GB of new files
#   --hunt-h            only build (and probe) the hunt-H-* images (a CUDA 12 worker: hard-link
#                       copies of build.sh's venv-rpath, torch 2.10.0 CUDA 12 + mooncake 0.3.10
#                       + sglang 0.5.10, with what SGLang 0.5.10 pins and the backends;
#                       tests/test_image_hunt_h.py): about 9 GB of new files, 1.6 GB of wheels
#   --hunt-d            build (and probe) only the hunt-D-* image roots (block at the end; a
#                       preload in the image's environment or /etc/ld.so.preload;
#                       tests/test_image_hunt_d.py): hard links, a few MB of new files
#   --hunt-i            build (and probe) only the hunt-I-* images (block at the end: what the
#                       worker's environment and the code site runs at start change;
#                       tests/test_image_hunt_i.py): hard links, a few MB of new files
#   --hunt-j            build (and probe) only the hunt-J-* images (block at the end: libraries
#                       the site code loads, the user's site folder of an image root;
#                       tests/test_image_hunt_j.py): hard links, about 100 MB of new files
#
# Images (each a venv; variants are hard-link copies (cp -al) of `stack` changed with their own pip):
#   stack           sglang 0.5.23 (--no-deps; read, never imported) + torch 2.14.1 (CUDA 13 build)
#                   + sglang-kernel 0.4.10 + sgl-deep-ep 0.1.2.post1 + nixl 1.5.1 (meta: `nixl`,
#                   `nixl_ep`) + nixl-cu13 1.5.1 + flashinfer-python 0.7.2 (+ its deps)
#                   + mooncake-transfer-engine-cuda13 0.3.14 (no prebuilt pg_*; JIT adapter)
#   stack-torch215  torch moved to 2.15.0 (with its own CUDA deps) under everything else
#   stack-nixl140   nixl + nixl-cu13 1.4.0: builds for torch 2.11-2.13, none for 2.14
#   stack-kernel048 sglang-kernel 0.4.8 (Requires-Dist torch==2.13.0) under torch 2.14.1
#   stack-cubin     flashinfer-cubin 0.6.13 beside flashinfer-python 0.7.2
#   stack-nonixl    nixl and nixl-cu13 uninstalled
#   stack-nixlcu12  nixl-cu13 replaced by nixl-cu12 $NIXL (a CUDA 12 nixl under the CUDA 13 torch)
#   stack-nixlboth  nixl-cu12 $NIXL beside nixl-cu13 (what `pip install nixl` with its deps gives)
# With --kernel-hunt (hard-link copies of `stack`, or of `stack-cubin` for fi-*), each probed
# also with sgl_kernel@cc80/90/100/120 (import sgl_kernel as a GPU of that capability sees it):
#   hunt-k-old034     sglang-kernel out, sgl-kernel $KERNEL_ANCIENT in (before the rename and any
#                     torch pin: flat common_ops, a CUDA 12 build) under torch $TORCH
#   hunt-k-botha      sgl-kernel $KERNEL_ANCIENT installed after sglang-kernel $KERNEL (its
#                     __init__.py wins; 0.4.10's load_utils.py and sm*/ stay beside it)
#   hunt-k-bothb      sglang-kernel $KERNEL installed after sgl-kernel $KERNEL_ANCIENT
#   hunt-k-nosm100    stack without sgl_kernel/sm100/common_ops.* (the build of every GPU but 9.0)
#   hunt-k-unreadable stack with sgl_kernel/sm100/ mode 000 (root reads it; another user cannot)
#   hunt-fi-074cubin  flashinfer-python $FI_NEXT beside flashinfer-cubin $CUBIN_OTHER (0.7 ignores it)
#   hunt-fi-0612cubin flashinfer-python $FI_OLD beside flashinfer-cubin $CUBIN_OTHER (0.6 raises)
#   and $REPORTS/hunt-stack.json: `stack` probed with the same capabilities.
# (their wheels in $R/hunt-dl, JIT caches in $R/hunt-pgjit, FlashInfer's workspace $R/hunt-fi).
# Other folders: $R/stack-dl (wheels, sha256-checked), $R/stack-stubs/libcuda.so.1 (stub driver),
# $R/stack-pgjit (mooncake JIT caches), $R/stack-fi (FlashInfer's workspace), $R/reports/stack*.json.
#
# Environment: REALIMG (default /tmp/realimg), REALIMG_TOOLS (default <repo>/../shared/tools/realimg:
# fetch_wheel.py and indexurl.py are used from there), PYBASE (a CPython 3.11), JIT_ARCH (9.0).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
R="${REALIMG:-/tmp/realimg}"
TOOLS="${REALIMG_TOOLS:-$ROOT/../shared/tools/realimg}"
PYBASE="${PYBASE:-$(python3.11 -c 'import sys; print(sys.executable)' 2>/dev/null || command -v python3)}"
DL="$R/stack-dl"; STUBS="$R/stack-stubs"; REPORTS="$R/reports"; BASE="$R/stack"; PGJIT="$R/stack-pgjit"
JIT_ARCH="${JIT_ARCH:-9.0}"

# What goes into the images (the build's inputs; what each release ships is read from its files).
TORCH=2.14.1; TORCH_NEXT=2.15.0
SGLANG=0.5.23
KERNEL=0.4.10; KERNEL_OLD=0.4.8
DEEPEP=0.1.2.post1
NIXL=1.5.1; NIXL_OLD=1.4.0
FLASHINFER=0.7.2; CUBIN_OTHER=0.6.13
MOONCAKE_DIST=mooncake-transfer-engine-cuda13; MOONCAKE=0.3.14
VARIANTS="torch215 nixl140 kernel048 cubin nonixl nixlcu12 nixlboth"
# --kernel-hunt (see the header): the sgl_kernel / flashinfer classes
KERNEL_ANCIENT=0.3.4; FI_NEXT=0.7.4; FI_OLD=0.6.12
HUNT_KERNEL="k-old034 k-botha k-bothb k-nosm100 k-unreadable fi-074cubin fi-0612cubin"
HUNT_CAPS="sgl_kernel@cc80,sgl_kernel@cc90,sgl_kernel@cc100,sgl_kernel@cc120"

NO_VARIANTS=0; ONLY=""; NO_PROBE=0; PROBE_ONLY=0; MC_JIT=0; REBUILD=0; KHUNT=0; HUNT_NIXL=0; HUNT_C=0; HUNT_G=0; HUNT_D=0; HUNT_H=0; HUNT_I=0; HUNT_J=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-variants) NO_VARIANTS=1;; --only) ONLY="${2:?--only needs a variant name}"; shift;;
    --no-probe) NO_PROBE=1;; --probe-only) PROBE_ONLY=1;; --mooncake-jit) MC_JIT=1;;
    --rebuild-variants) REBUILD=1;;
    --kernel-hunt) KHUNT=1;;
    --hunt-nixl) HUNT_NIXL=1;;
    --hunt-c) HUNT_C=1;;
    --hunt-g) HUNT_G=1;;
    --hunt-d) HUNT_D=1;;
    --hunt-h) HUNT_H=1;;
    --hunt-i) HUNT_I=1;;
    --hunt-j) HUNT_J=1;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0;;
    *) echo "stack.sh: unknown option $1 (see --help)" >&2; exit 2;;
  esac
  shift
done
if [ -n "$ONLY" ] && ! grep -qw -- "$ONLY" <<<"$VARIANTS"; then
  echo "stack.sh: no variant $ONLY (one of: $VARIANTS)" >&2; exit 2
fi
[ -f "$TOOLS/fetch_wheel.py" ] || { echo "stack.sh: $TOOLS/fetch_wheel.py not found (set REALIMG_TOOLS)" >&2; exit 2; }

T0=$(date +%s)
log() { printf '\033[1m[stack]\033[0m %s\n' "$*" >&2; }
# fetch <name> <version> [substring...]: the wheel's path (downloaded once, sha256 checked)
fetch() { "$PYBASE" "$TOOLS/fetch_wheel.py" "$DL" "$@"; }
sp_of() { echo "$1/lib/python3.11/site-packages"; }
dver() { "$1/bin/python" - "$2" <<'EOF' 2>/dev/null || true
import sys, importlib.metadata as m
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass
EOF
}
pipv() { local v="$1"; shift
  "$v/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
pipi() { local v="$1"; shift; pipv "$v" install --no-warn-conflicts "$@"; }
timed() { local s; s=$(date +%s); "$@"; log "  ($(( $(date +%s) - s )) s)"; }

build_base() {
  [ -x "$BASE/bin/python" ] || { log "creating $BASE"; "$PYBASE" -m venv "$BASE"; }
  if [ "$(dver "$BASE" torch)" != "$TORCH" ]; then
    # torch $TORCH (CUDA 13) lies on this disk in pip's extra index; pip takes its deps from there
    # and the index. flashinfer-python brings the rest of its own Requires-Dist.
    log "stack: torch $TORCH + sglang-kernel $KERNEL + sgl-deep-ep $DEEPEP + nixl-cu13 $NIXL + flashinfer-python $FLASHINFER + $MOONCAKE_DIST $MOONCAKE (with deps)"
    pipi "$BASE" "torch==$TORCH" \
      "$(fetch sglang-kernel "$KERNEL" abi3 x86_64)" \
      "$(fetch sgl-deep-ep "$DEEPEP" cp311 x86_64)" \
      "$(fetch nixl-cu13 "$NIXL")" \
      "$(fetch flashinfer-python "$FLASHINFER")" \
      "$(fetch "$MOONCAKE_DIST" "$MOONCAKE")"
  fi
  if [ "$(dver "$BASE" nixl)" != "$NIXL" ]; then
    # the meta distribution `nixl` provides `import nixl` and `import nixl_ep` (a dispatcher to
    # nixl_ep_cu<CUDA major>); its Requires-Dist also names nixl-cu12, which a CUDA 13 torch never loads
    log "stack: nixl $NIXL (meta: nixl, nixl_ep) --no-deps"
    pipi "$BASE" --no-deps "$(fetch nixl "$NIXL")"
  fi
  if [ "$(dver "$BASE" sglang)" != "$SGLANG" ]; then
    log "stack: sglang $SGLANG --no-deps"
    pipi "$BASE" --no-deps "$(fetch sglang "$SGLANG")"
  fi
}

base_fingerprint() {
  echo "torch=$(dver "$BASE" torch) sglang=$(dver "$BASE" sglang) kernel=$(dver "$BASE" sglang-kernel) nixl=$(dver "$BASE" nixl-cu13) flashinfer=$(dver "$BASE" flashinfer-python) deepep=$(dver "$BASE" sgl-deep-ep) mooncake=$(dver "$BASE" "$MOONCAKE_DIST")"
}

# clone <name> <what>: 0 when the copy must be (re)made and changed, 1 when an up-to-date one exists
clone() {
  local dst="$R/stack-$1" fp; fp=$(base_fingerprint)
  if [ "$REBUILD" = 0 ] && [ -f "$dst/.stack-variant" ] && grep -qxF "base: $fp" "$dst/.stack-variant"; then
    return 1
  fi
  log "variant stack-$1: $2"
  rm -rf "$dst"
  cp -al "$BASE" "$dst"
  # bin/ scripts and pyvenv.cfg name the venv's path: rewrite them as new files (breaking the link)
  local f
  for f in "$dst"/bin/* "$dst/pyvenv.cfg"; do
    if [ -f "$f" ] && [ ! -L "$f" ] && grep -Iq "$BASE" "$f" 2>/dev/null; then
      sed "s#$BASE\\b#$dst#g" "$f" > "$f.tmp"; chmod --reference="$f" "$f.tmp"; mv -f "$f.tmp" "$f"
    fi
  done
  return 0
}
# rm first: the copy's marker would otherwise be a hard link to nothing of ours, but be safe
mark() { rm -f "$R/stack-$1/.stack-variant"; printf 'base: %s\nwhat: %s\n' "$(base_fingerprint)" "$2" > "$R/stack-$1/.stack-variant"; }

variant() {  # variant <name>: build it (pip unlinks before it writes, so `stack` is never changed)
  local v="$R/stack-$1"
  case "$1" in
    torch215)
      clone "$1" "torch $TORCH_NEXT under everything else" || return 0
      # /etc/xdg/pip caps torch at the version on this disk: lift it for this one call only
      PIP_CONFIG_FILE=/dev/null pipi "$v" "torch==$TORCH_NEXT"
      mark "$1" "torch $TORCH_NEXT (pip install, its own deps) under stack";;
    nixl140)
      clone "$1" "nixl + nixl-cu13 $NIXL_OLD (no build for torch ${TORCH%.*})" || return 0
      pipv "$v" uninstall -y nixl nixl-cu13
      pipi "$v" --no-deps "$(fetch nixl-cu13 "$NIXL_OLD")" "$(fetch nixl "$NIXL_OLD")"
      mark "$1" "nixl, nixl-cu13 $NIXL_OLD";;
    kernel048)
      clone "$1" "sglang-kernel $KERNEL_OLD (built for another torch)" || return 0
      pipv "$v" uninstall -y sglang-kernel
      pipi "$v" --no-deps "$(fetch sglang-kernel "$KERNEL_OLD" abi3 x86_64)"
      mark "$1" "sglang-kernel $KERNEL_OLD";;
    cubin)
      clone "$1" "flashinfer-cubin $CUBIN_OTHER beside flashinfer-python $FLASHINFER" || return 0
      pipi "$v" --no-deps "$(fetch flashinfer-cubin "$CUBIN_OTHER")"
      mark "$1" "flashinfer-cubin $CUBIN_OTHER added";;
    nonixl)
      clone "$1" "no nixl at all" || return 0
      pipv "$v" uninstall -y nixl nixl-cu13
      mark "$1" "nixl, nixl-cu13 uninstalled";;
    nixlcu12)
      # the meta `nixl` stays; its dispatcher asks torch's CUDA major (13) for nixl_ep_cu13
      clone "$1" "nixl-cu12 $NIXL instead of nixl-cu13 (CUDA 12 nixl, CUDA 13 torch)" || return 0
      pipv "$v" uninstall -y nixl-cu13
      pipi "$v" --no-deps "$(fetch nixl-cu12 "$NIXL")"
      mark "$1" "nixl-cu13 uninstalled, nixl-cu12 $NIXL installed";;
    nixlboth)
      # the meta's Requires-Dist names nixl-cu12 and nixl-cu13 unconditionally
      clone "$1" "nixl-cu12 $NIXL beside nixl-cu13 $NIXL" || return 0
      pipi "$v" --no-deps "$(fetch nixl-cu12 "$NIXL")"
      mark "$1" "nixl-cu12 $NIXL added";;
  esac
}

# The stub driver: every cu* symbol the images' objects import from libcuda.so.1 (torch's own
# and the CUDA runtime's are dlopen()ed and looked up with cuGetProcAddress, so they need none).
build_stub() {
  local sps=() d
  for d in "$BASE" "$R"/stack-*; do [ -x "$d/bin/python" ] && sps+=("$(sp_of "$d")"); done
  "$HERE/make_libcuda_stub.sh" "$STUBS" "${sps[@]}" >&2
}

# mooncake 0.3.14 ships no pg_*.so: `import mooncake.pg` compiles an adapter into
# MOONCAKE_PG_JIT_DIR (keyed by the image's absolute path and torch), so each image has its own.
jit_prebuild() {
  local v="$1" name sp; name=$(basename "$v"); sp=$(sp_of "$v")
  [ -f "$sp/mooncake/pg.py" ] || return 0
  mkdir -p "$PGJIT/$name"
  if MOONCAKE_PG_JIT_DIR="$PGJIT/$name" LD_LIBRARY_PATH="$STUBS" "$v/bin/python" -m mooncake.pg --report 2>/dev/null | grep -q 'cached adapter: /'; then
    return 0
  fi
  log "JIT-building mooncake's torch adapter for $name (minutes)"
  PATH="$v/bin:$PATH" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" TORCH_CUDA_ARCH_LIST="$JIT_ARCH" \
    CPATH="$sp/nvidia/cu13/include${CPATH:+:$CPATH}" LIBRARY_PATH="$sp/nvidia/cu13/lib${LIBRARY_PATH:+:$LIBRARY_PATH}" \
    MOONCAKE_PG_JIT_DIR="$PGJIT/$name" LD_LIBRARY_PATH="$STUBS" \
    "$v/bin/python" -m mooncake.pg --prebuild > "$PGJIT/$name.log" 2>&1 \
    || { log "JIT build failed for $name, see $PGJIT/$name.log"; tail -3 "$PGJIT/$name.log" >&2; }
}

# The packed `stack` (tests/test_image_stack.py's stack-oci: the venv at /opt/venv; its config sets
# no MOONCAKE_PG_JIT_DIR, HOME or User and its root has no /etc/passwd, so runc gives its worker
# HOME=/ and the cache /.cache/mooncake/pg_jit) keys and links its adapter by /opt/venv, not by
# $BASE: compiled here for that path into $R/stack-oci-pgjit/<key>, which the packed test adds to
# the image's own cache folder as a layer. /opt/venv exists only in a private mount namespace (a
# tmpfs over /opt, $BASE bound on it): needs root; the host's /opt is untouched.
jit_prebuild_packed() {
  local out="$R/stack-oci-pgjit" sp=/opt/venv/lib/python3.11/site-packages
  [ -f "$(sp_of "$BASE")/mooncake/pg.py" ] || return 0
  ls "$out"/*/_mooncake_pg_jit_*.so >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || { log "not root: the packed image's adapter is not compiled"; return 0; }
  mkdir -p "$out"
  log "JIT-building mooncake's torch adapter for the packed stack (/opt/venv; minutes)"
  unshare -m --propagation private /bin/sh -c "mount -t tmpfs tmpfs /opt && mkdir /opt/venv \
    && mount --bind '$BASE' /opt/venv && exec env PATH=/opt/venv/bin:\$PATH \
    CUDA_HOME='${CUDA_HOME:-/usr/local/cuda}' TORCH_CUDA_ARCH_LIST='$JIT_ARCH' \
    CPATH=$sp/nvidia/cu13/include LIBRARY_PATH=$sp/nvidia/cu13/lib MOONCAKE_PG_JIT_DIR='$out' \
    LD_LIBRARY_PATH='$STUBS' /opt/venv/bin/python -m mooncake.pg --prebuild" > "$out.log" 2>&1 \
    || { log "JIT build failed for the packed stack, see $out.log"; tail -3 "$out.log" >&2; }
}

probe() {  # probe <image dir>: $REPORTS/<name>.json, and a one-line summary per module
  local v="$1" name; name=$(basename "$v")
  mkdir -p "$REPORTS" "$PGJIT/$name" "$R/stack-fi"
  log "probing $name"
  env -u PYTHONPATH -u VIRTUAL_ENV LD_LIBRARY_PATH="$STUBS" CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB="$STUBS/nvml" \
    MOONCAKE_PG_JIT_DIR="$PGJIT/$name" FLASHINFER_WORKSPACE_BASE="$R/stack-fi" \
    "$v/bin/python" "$HERE/probe_stack.py" > "$REPORTS/$name.json.tmp" && mv -f "$REPORTS/$name.json.tmp" "$REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$REPORTS/$name.json" >&2
}

images() {
  local n
  [ -z "$ONLY" ] && echo "$BASE"
  if [ "$NO_VARIANTS" = 0 ]; then for n in $VARIANTS; do
    if [ -z "$ONLY" ] || [ "$ONLY" = "$n" ]; then echo "$R/stack-$n"; fi
  done; fi
}

# --- --kernel-hunt: the sgl_kernel / flashinfer classes (huntB) ------------------------------
# the older wheels go to a folder of their own; JIT and FlashInfer workspaces too
fetch_hunt() { "$PYBASE" "$TOOLS/fetch_wheel.py" "$R/hunt-dl" "$@"; }

hunt_variant() {  # hunt_variant <name>: $R/hunt-<name>, a hard-link copy changed by its own pip
  local v="$R/hunt-$1" src="$BASE" sp
  case "$1" in fi-*) src="$R/stack-cubin";; k-bothb) src="$R/hunt-k-old034";; esac
  [ "$1" = k-bothb ] && hunt_variant k-old034
  [ -f "$v/.hunt-variant" ] && [ "$REBUILD" = 0 ] && return 0
  [ -x "$src/bin/python" ] || { log "hunt-$1 needs $src (build it first)"; return 1; }
  log "hunt-$1 (from $(basename "$src"))"
  if [ -d "$v" ]; then chmod -R u+rwx "$v" 2>/dev/null || true; rm -rf "$v"; fi
  cp -al "$src" "$v"; rm -f "$v/.hunt-variant" "$v/.stack-variant"
  sp=$(sp_of "$v")
  case "$1" in
    k-old034) pipv "$v" uninstall -y sglang-kernel
              pipi "$v" --no-deps "$(fetch_hunt sgl-kernel "$KERNEL_ANCIENT" abi3 x86_64)";;
    k-botha)  pipi "$v" --no-deps "$(fetch_hunt sgl-kernel "$KERNEL_ANCIENT" abi3 x86_64)";;
    k-bothb)  pipi "$v" --no-deps "$(fetch sglang-kernel "$KERNEL" abi3 x86_64)";;
    k-nosm100) rm "$sp"/sgl_kernel/sm100/common_ops.*;;   # unlinks: stack keeps its file
    k-unreadable) chmod 000 "$sp/sgl_kernel/sm100";;      # a folder of the copy's own
    fi-074cubin) pipi "$v" --no-deps "$(fetch_hunt flashinfer-python "$FI_NEXT" py3-none-any)";;
    fi-0612cubin) pipi "$v" --no-deps "$(fetch_hunt flashinfer-python "$FI_OLD" py3-none-any)";;
  esac
  echo "$1" > "$v/.hunt-variant"
}

hunt_probe() {  # hunt_probe <image dir> <report name>: the probe, with the capabilities
  local v="$1" name="$2"
  mkdir -p "$REPORTS" "$R/hunt-fi" "$R/hunt-pgjit/$name"
  log "probing $name"
  env -u PYTHONPATH -u VIRTUAL_ENV LD_LIBRARY_PATH="$STUBS" CUDA_VISIBLE_DEVICES= \
    PROBE_NVML_STUB="$STUBS/nvml" PROBE_ALSO="$HUNT_CAPS" MOONCAKE_PG_JIT_DIR="$R/hunt-pgjit/$name" \
    FLASHINFER_WORKSPACE_BASE="$R/hunt-fi" \
    "$v/bin/python" "$HERE/probe_stack.py" > "$REPORTS/$name.json.tmp" \
    && mv -f "$REPORTS/$name.json.tmp" "$REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$REPORTS/$name.json" >&2
}

kernel_hunt() {
  local n
  if [ "$PROBE_ONLY" = 0 ]; then
    [ -x "$R/stack-cubin/bin/python" ] || variant cubin
    for n in $HUNT_KERNEL; do timed hunt_variant "$n"; done
  fi
  if [ "$NO_PROBE" = 0 ]; then
    [ -f "$STUBS/libcuda.so.1" ] || build_stub
    timed hunt_probe "$BASE" hunt-stack
    for n in $HUNT_KERNEL; do
      [ -x "$R/hunt-$n/bin/python" ] && timed hunt_probe "$R/hunt-$n" "hunt-$n"
    done
  fi
}

mkdir -p "$R" "$DL"
MAIN=1; [ "$HUNT_C" = 1 ] && MAIN=0   # --hunt-c: only its block (its images come from `stack`)
[ "$HUNT_G" = 1 ] && MAIN=0            # --hunt-g: the same
[ "$HUNT_H" = 1 ] && MAIN=0           # --hunt-h: only its block (its images come from venv-rpath)
[ "$HUNT_D" = 1 ] && MAIN=0           # --hunt-d: only its block (its roots come from hunt-A-root-stack)
[ "$HUNT_I" = 1 ] && MAIN=0           # --hunt-i: only its block (from stack and hunt-A-root-stack)
[ "$HUNT_J" = 1 ] && MAIN=0           # --hunt-j: the same
if [ "$KHUNT" = 1 ]; then  # only them: the stack images are their sources, never changed here
  [ -x "$BASE/bin/python" ] || { log "build stack first (tests/realimg/stack.sh)"; exit 2; }
  kernel_hunt; log "time: $(( $(date +%s) - T0 )) s"; exit 0
fi
if [ "$PROBE_ONLY" = 0 ] && [ "$MAIN" = 1 ]; then
  timed build_base
  if [ "$NO_VARIANTS" = 0 ]; then
    for n in $VARIANTS; do
      if [ -z "$ONLY" ] || [ "$ONLY" = "$n" ]; then timed variant "$n"; fi
    done
  fi
  build_stub
  if [ "$MC_JIT" = 1 ]; then for v in $(images); do [ -x "$v/bin/python" ] && timed jit_prebuild "$v"; done; fi
  if [ "$MC_JIT" = 1 ]; then timed jit_prebuild_packed; fi
fi
if [ "$NO_PROBE" = 0 ] && [ "$MAIN" = 1 ]; then
  [ -f "$STUBS/libcuda.so.1" ] || build_stub
  for v in $(images); do [ -x "$v/bin/python" ] && timed probe "$v"; done
fi
# ---- hunt-* images of nixl and deep_ep (--hunt-nixl; tests/test_image_hunt_nixl.py) ----------
# Shapes a hidden image of these classes may have that the variants above do not: each a
# hard-link copy of `stack` (or of hunt-torch213) changed with its own pip, probed like the
# others into $R/hunt-A-reports/<name>.json; hunt-A-root-stack is `stack` as an unpacked image
# root (/opt/venv, the minimal root tests/lib/umoci.py packs, the stdlib hard-linked so a
# chroot runs the real import: no CUDA toolkit, no CUDA_HOME), probed in a chroot.
HUNT_DL="$R/hunt-A-dl"; HUNT_REPORTS="$R/hunt-A-reports"
HUNT_NIXL_IMAGES="torch213 nixl130 nixl120 metaonly cu12nometa bothbroken unreadable nonvshmem t213-nixl140 nvshmem12 deepep010 deepep011 t213-deepep011 deepep013rc3 meta151-cu13120"
hunt_clone() {  # hunt_clone <name> <source image dir>: 0 when (re)made, 1 when it is there
  local dst="$R/hunt-$1" src="$2" f
  if [ "$REBUILD" = 0 ] && [ -f "$dst/.hunt-variant" ]; then return 1; fi
  log "hunt-$1 (from $(basename "$src"))"
  rm -rf "$dst"; cp -al "$src" "$dst"
  for f in "$dst"/bin/* "$dst/pyvenv.cfg"; do
    if [ -f "$f" ] && [ ! -L "$f" ] && grep -Iq "$src" "$f" 2>/dev/null; then
      sed "s#$src\\b#$dst#g" "$f" > "$f.tmp"; chmod --reference="$f" "$f.tmp"; mv -f "$f.tmp" "$f"
    fi
  done
  return 0
}
hunt_mark() { rm -f "$R/hunt-$1/.hunt-variant"; echo "$2" > "$R/hunt-$1/.hunt-variant"; }
nixl_hunt_variant() {
  local v="$R/hunt-$1" so
  so="lib/python3.11/site-packages/nixl_ep_cu13/nixl_ep_cpp_torch214.cpython-311-x86_64-linux-gnu.so"
  case "$1" in
    torch213)  # shared with huntB (read-only there): torch 2.13.0 under everything, --no-deps
      hunt_clone "$1" "$BASE" || return 0
      local w; w=$(ls "$R"/dl/torch-2.13.0-cp311-*x86_64.whl 2>/dev/null | head -1 || true)
      pipi "$v" --no-deps "${w:-$(fetch torch 2.13.0)}"
      hunt_mark "$1" "torch 2.13.0 --no-deps"; touch "$R/hunt-torch213.READY";;
    nixl130|nixl120)  # one plain build (from . import nixl_ep_cpp), bound to an older torch
      local ver="1.${1:5:1}.0"
      hunt_clone "$1" "$BASE" || return 0
      pipv "$v" uninstall -y nixl nixl-cu13
      pipi "$v" --no-deps "$("$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_DL" nixl-cu13 "$ver")" \
        "$("$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_DL" nixl "$ver")"
      hunt_mark "$1" "nixl + nixl-cu13 $ver";;
    meta151-cu13120)  # nixl-cu13 1.2.0 --no-deps after the meta 1.5.1: its nixl_ep/ over the meta's
      hunt_clone "$1" "$BASE" || return 0
      pipv "$v" uninstall -y nixl-cu13
      pipi "$v" --no-deps "$("$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_DL" nixl-cu13 1.2.0)"
      hunt_mark "$1" "nixl-cu13 1.5.1 replaced by 1.2.0 (the meta nixl 1.5.1 kept)";;
    metaonly)  # the meta nixl without any nixl-cuNN
      hunt_clone "$1" "$BASE" || return 0
      pipv "$v" uninstall -y nixl-cu13; hunt_mark "$1" "nixl-cu13 uninstalled";;
    cu12nometa)  # nixl-cu12 alone: nixl_ep_cu12 but no nixl_ep
      hunt_clone "$1" "$BASE" || return 0
      pipv "$v" uninstall -y nixl nixl-cu13; pipi "$v" --no-deps "$(fetch nixl-cu12 "$NIXL")"
      hunt_mark "$1" "nixl, nixl-cu13 uninstalled; nixl-cu12 $NIXL";;
    bothbroken)  # nixl-cu12 beside nixl-cu13, cu13's torch214 build truncated (a new file)
      hunt_clone "$1" "$BASE" || return 0
      pipi "$v" --no-deps "$(fetch nixl-cu12 "$NIXL")"
      head -c 4096 "$v/$so" > "$v/$so.tmp" && mv -f "$v/$so.tmp" "$v/$so"
      hunt_mark "$1" "nixl-cu12 added; nixl_ep_cpp_torch214 truncated to 4 KiB";;
    unreadable)  # the torch214 build mode 000 (a copy of its own); the check runs as root
      hunt_clone "$1" "$BASE" || return 0
      cp "$v/$so" "$v/$so.tmp" && mv -f "$v/$so.tmp" "$v/$so" && chmod 000 "$v/$so"
      hunt_mark "$1" "nixl_ep_cpp_torch214 mode 000";;
    nonvshmem)  # deep_ep's (and torch's) libnvshmem_host.so.3 gone
      hunt_clone "$1" "$BASE" || return 0
      pipv "$v" uninstall -y nvidia-nvshmem-cu13; hunt_mark "$1" "nvidia-nvshmem-cu13 uninstalled";;
    nvshmem12)  # libnvshmem_host.so.3 from nvidia-nvshmem-cu12 under the CUDA 13 torch and deep_ep
      hunt_clone "$1" "$BASE" || return 0
      pipv "$v" uninstall -y nvidia-nvshmem-cu13
      pipi "$v" --no-deps "$("$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_DL" nvidia-nvshmem-cu12 3.4.5 x86_64)"
      hunt_mark "$1" "nvidia-nvshmem-cu13 replaced by nvidia-nvshmem-cu12 3.4.5";;
    deepep010|deepep011|deepep013rc3|t213-deepep011)  # other sgl-deep-ep releases (0.1.0: a
      # top-level deep_ep_cpp; 0.1.3rc3: built for torch 2.15 and a newer NVSHMEM)
      local dv="${1##*deepep}"; dv="0.1.${dv:2}"; local src="$BASE"
      case "$1" in t213-*) src="$R/hunt-torch213";; esac
      hunt_clone "$1" "$src" || return 0
      pipv "$v" uninstall -y sgl-deep-ep
      pipi "$v" --no-deps "$("$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_DL" sgl-deep-ep "$dv" cp311 x86_64)"
      hunt_mark "$1" "sgl-deep-ep $dv";;
    t213-nixl140)  # nixl 1.4.0 (builds for 2.11-2.13) under torch 2.13
      hunt_clone "$1" "$R/hunt-torch213" || return 0
      pipv "$v" uninstall -y nixl nixl-cu13
      pipi "$v" --no-deps "$(fetch nixl-cu13 "$NIXL_OLD")" "$(fetch nixl "$NIXL_OLD")"
      hunt_mark "$1" "nixl, nixl-cu13 $NIXL_OLD under torch 2.13.0";;
  esac
}
nixl_hunt_probe() {  # nixl_hunt_probe <image dir>
  local v="$1" name; name=$(basename "$v"); mkdir -p "$HUNT_REPORTS"
  env -u PYTHONPATH -u VIRTUAL_ENV LD_LIBRARY_PATH="$STUBS" CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB="$STUBS/nvml" \
    MOONCAKE_PG_JIT_DIR="$PGJIT/$name" FLASHINFER_WORKSPACE_BASE="$R/stack-fi" \
    "$v/bin/python" "$HERE/probe_stack.py" > "$HUNT_REPORTS/$name.json.tmp" && mv -f "$HUNT_REPORTS/$name.json.tmp" "$HUNT_REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_REPORTS/$name.json" >&2
}
hunt_root() {  # $R/hunt-A-root-stack, probed in a chroot with and without CUDA_HOME
  local root="$R/hunt-A-root-stack" tag chroot; chroot=$(command -v chroot)
  if [ ! -x "$root/opt/venv/bin/python" ] || [ "$REBUILD" = 1 ]; then
    log "hunt-A-root-stack: stack as an unpacked image root"
    "$PYBASE" "$HERE/hunt_root.py" "$BASE" "$root"
  fi
  for tag in "" "CUDA_HOME=/usr/local/cuda"; do
    env -i PATH=/opt/venv/bin:/usr/bin:/bin LD_LIBRARY_PATH=/stubs CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB=/stubs/nvml HOME=/tmp $tag \
      unshare -m --propagation private /bin/bash -c "mount -t proc proc '$root/proc' && mount --rbind /dev '$root/dev' && exec '$chroot' '$root' /opt/venv/bin/python /probe_stack.py" \
      > "$HUNT_REPORTS/root-stack${tag:+-cudahome}.json"
    "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_REPORTS/root-stack${tag:+-cudahome}.json" >&2
  done
}
if [ "$HUNT_NIXL" = 1 ]; then
  mkdir -p "$HUNT_DL" "$HUNT_REPORTS"
  if [ "$PROBE_ONLY" = 0 ]; then for n in $HUNT_NIXL_IMAGES; do timed nixl_hunt_variant "$n"; done; fi
  if [ "$NO_PROBE" = 0 ]; then
    for n in $HUNT_NIXL_IMAGES; do [ -x "$R/hunt-$n/bin/python" ] && timed nixl_hunt_probe "$R/hunt-$n"; done
    timed hunt_root
  fi
fi

# ---- hunt-C-* images (--hunt-c; tests/test_image_hunt_c.py) --------------------------------------
# Classes of issue 39 the hunts above left unbuilt, each a hard-link copy of `stack` changed with
# its own pip (wheels in $R/hunt-C-dl), probed into $R/hunt-C-reports/<name>[-<env>].json; an
# image whose truth depends on the worker's environment is probed once per environment (the
# image config's Env it stands for), named after it:
#   hunt-C-sglang0521 / 0522  an older sglang (--no-deps) over the same extensions
#   hunt-C-ncclalt    nvidia-nccl-cu13 $NCCL_ALT put aside in <venv>/nccl-alt (pip --target):
#                     probed plain, with LD_PRELOAD of its libnccl.so.2, with LD_LIBRARY_PATH
#                     on its folder, with the preload and EP_SUPPRESS_NCCL_CHECK=1, and with
#                     NCCL_DIR (deep_ep's find_nccl_root) on a folder without NCCL
#   hunt-C-ncclcu12   nvidia-nccl-cu12 $NCCL_CU12 installed over nvidia-nccl-cu13 (one file)
#   hunt-C-kernel0321 sglang-kernel out, sgl-kernel $KERNEL_03X in (a CUDA 12 build that preloads
#                     libcudart.so.12 from /usr/local/cuda when it is there)
#   hunt-C-cputorch   torch 2.13.0+cpu (--no-deps) under the CUDA 13 extensions
#   hunt-C-fi0612-jc  flashinfer-python $FI_OLD (--no-deps) with a stand-in flashinfer-jit-cache
#                     $JC_POST (tests/realimg/jit_cache_wheel.py: the index has no jit-cache)
#   hunt-C-fi072-jc   stack with the stand-in flashinfer-jit-cache $JC_OTHER
#   hunt-C-root-nobz2 hunt-A-root-stack (an image root) without the system libbz2
HUNT_C_DL="$R/hunt-C-dl"; HUNT_C_REPORTS="$R/hunt-C-reports"
NCCL_ALT=2.32.6; NCCL_CU12=2.30.7; KERNEL_03X=0.3.21
JC_POST=0.6.12.post1+cu130; JC_OTHER=0.7.1+cu130
HUNT_C_IMAGES="C-sglang0521 C-sglang0522 C-ncclalt C-ncclcu12 C-kernel0321 C-cputorch C-fi0612-jc C-fi072-jc"
fetch_c() { "$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_C_DL" "$@"; }
c_hunt_variant() {
  local v="$R/hunt-$1"
  case "$1" in
    C-sglang0521|C-sglang0522)
      local sv="0.5.${1#C-sglang05}"; hunt_clone "$1" "$BASE" || return 0
      local w; w=$(ls "$R"/dl/sglang-"$sv"-cp311-*.whl 2>/dev/null | head -1 || true)
      pipi "$v" --no-deps "${w:-$(fetch_c sglang "$sv")}"
      hunt_mark "$1" "sglang $sv --no-deps";;
    C-ncclalt)
      hunt_clone "$1" "$BASE" || return 0
      pipi "$v" --no-deps --target "$v/nccl-alt" "$(fetch_c nvidia-nccl-cu13 "$NCCL_ALT" x86_64)"
      hunt_mark "$1" "nvidia-nccl-cu13 $NCCL_ALT in nccl-alt/ (pip --target)";;
    C-ncclcu12)
      hunt_clone "$1" "$BASE" || return 0
      pipi "$v" --no-deps "$(fetch_c nvidia-nccl-cu12 "$NCCL_CU12" x86_64)"
      hunt_mark "$1" "nvidia-nccl-cu12 $NCCL_CU12 over nvidia-nccl-cu13";;
    C-kernel0321)
      hunt_clone "$1" "$BASE" || return 0
      pipv "$v" uninstall -y sglang-kernel
      pipi "$v" --no-deps "$(fetch_c sgl-kernel "$KERNEL_03X" abi3 x86_64)"
      hunt_mark "$1" "sglang-kernel uninstalled; sgl-kernel $KERNEL_03X";;
    C-cputorch)
      hunt_clone "$1" "$BASE" || return 0
      local w; w=$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*x86_64.whl 2>/dev/null | head -1 || true)
      pipi "$v" --no-deps "${w:-$(fetch_c torch 2.13.0+cpu)}"
      hunt_mark "$1" "torch 2.13.0+cpu --no-deps";;
    C-fi0612-jc)
      hunt_clone "$1" "$BASE" || return 0
      pipi "$v" --no-deps "$(fetch_c flashinfer-python "$FI_OLD" py3-none-any)" \
        "$("$PYBASE" "$HERE/jit_cache_wheel.py" "$HUNT_C_DL" "$JC_POST")"
      hunt_mark "$1" "flashinfer-python $FI_OLD, stand-in flashinfer-jit-cache $JC_POST";;
    C-fi072-jc)
      hunt_clone "$1" "$BASE" || return 0
      pipi "$v" --no-deps "$("$PYBASE" "$HERE/jit_cache_wheel.py" "$HUNT_C_DL" "$JC_OTHER")"
      hunt_mark "$1" "stand-in flashinfer-jit-cache $JC_OTHER";;
  esac
}
c_probe() {  # c_probe <image dir> <report name> [VAR=value...]: probe_stack.py under that env
  local v="$1" name="$2"; shift 2; mkdir -p "$HUNT_C_REPORTS"
  env -u PYTHONPATH -u VIRTUAL_ENV LD_LIBRARY_PATH="$STUBS" CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB="$STUBS/nvml" \
    MOONCAKE_PG_JIT_DIR="$PGJIT/$name" FLASHINFER_WORKSPACE_BASE="$R/stack-fi" PROBE_NAMES=1 "$@" \
    "$v/bin/python" "$HERE/probe_stack.py" > "$HUNT_C_REPORTS/$name.json.tmp" && mv -f "$HUNT_C_REPORTS/$name.json.tmp" "$HUNT_C_REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_C_REPORTS/$name.json" >&2
}
c_root_nobz2() {  # hunt-A-root-stack without libbz2, probed in a chroot with CUDA_HOME set
  local root="$R/hunt-C-root-nobz2" chroot; chroot=$(command -v chroot)
  [ -x "$R/hunt-A-root-stack/opt/venv/bin/python" ] || { log "hunt-C-root-nobz2 needs hunt-A-root-stack (--hunt-nixl)"; return 0; }
  if [ ! -f "$root/.hunt-variant" ] || [ "$REBUILD" = 1 ]; then
    rm -rf "$root"; cp -al "$R/hunt-A-root-stack" "$root"
    rm -f "$root"/usr/lib/x86_64-linux-gnu/libbz2.so* "$root"/lib/x86_64-linux-gnu/libbz2.so*
    cp "$HERE/probe_stack.py" "$root/probe_stack.py.tmp" && mv -f "$root/probe_stack.py.tmp" "$root/probe_stack.py"
    echo "hunt-A-root-stack without libbz2" > "$root/.hunt-variant"
  fi
  mkdir -p "$HUNT_C_REPORTS"
  env -i PATH=/opt/venv/bin:/usr/bin:/bin LD_LIBRARY_PATH=/stubs CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB=/stubs/nvml HOME=/tmp CUDA_HOME=/usr/local/cuda PROBE_NAMES=1 \
    unshare -m --propagation private /bin/bash -c "mount -t proc proc '$root/proc' && mount --rbind /dev '$root/dev' && exec '$chroot' '$root' /opt/venv/bin/python /probe_stack.py" \
    > "$HUNT_C_REPORTS/C-root-nobz2.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_C_REPORTS/C-root-nobz2.json" >&2
}
if [ "$HUNT_C" = 1 ]; then
  mkdir -p "$HUNT_C_DL" "$HUNT_C_REPORTS"
  if [ "$PROBE_ONLY" = 0 ]; then for n in $HUNT_C_IMAGES; do timed c_hunt_variant "$n"; done; fi
  if [ "$NO_PROBE" = 0 ]; then
    for n in $HUNT_C_IMAGES; do [ -x "$R/hunt-$n/bin/python" ] && timed c_probe "$R/hunt-$n" "$n"; done
    alt="$R/hunt-C-ncclalt/nccl-alt/nvidia/nccl/lib"
    if [ -d "$alt" ]; then
      timed c_probe "$R/hunt-C-ncclalt" C-ncclalt-preload LD_PRELOAD="$alt/libnccl.so.2"
      timed c_probe "$R/hunt-C-ncclalt" C-ncclalt-ldpath LD_LIBRARY_PATH="$STUBS:$alt"
      timed c_probe "$R/hunt-C-ncclalt" C-ncclalt-preload-suppress LD_PRELOAD="$alt/libnccl.so.2" EP_SUPPRESS_NCCL_CHECK=1
      timed c_probe "$R/hunt-C-ncclalt" C-ncclalt-nccldir NCCL_DIR=/nonexistent
    fi
    timed c_root_nobz2
  fi
fi

# ---- hunt-G-* images (--hunt-g; tests/test_image_hunt_g.py) --------------------------------------
# Packages no loader rule of moonpin reads, which its check follows as a plain import: real wheels
# from the index (in $R/hunt-G-dl) installed --no-deps into hard-link copies of `stack` by their
# own pip, each probed with `import <package>` (probe_stack.py's import@<name>, $PROBE_PLAIN) into
# $R/hunt-G-reports/<name>.json:
#   hunt-G-ktkernel  kt-kernel $KT_KERNEL (Requires-Dist torch==2.9.1): a top-level `deep_gemm`
#                    (`from . import deep_gemm_cpp`, SGLang's --moe-runner-backend deep_gemm) built
#                    for that torch; the wheel also writes its own `sgl_kernel/` over sglang-kernel's
#   hunt-G-ktkernel-cu12  the same with CUDA 12's nvrtc and runtime put aside in <venv>/cu12
#                    (pip --target): probed with LD_LIBRARY_PATH on their folders too, where
#                    deep_gemm's build finds libnvrtc.so.12 and meets the torch it was not built for
#   hunt-G-plain     torch-memory-saver $TMS (SGLang's --enable-memory-saver: ctypes loads of a
#                    computed path), xformers $XFORMERS (its _C by torch.ops.load_library),
#                    humming-kernels $HUMMING (--moe-runner-backend humming)
#   stack itself     probed the same way for the ruled packages (deep_ep, flashinfer, nixl_ep,
#                    sgl_kernel): the cross-check of each rule against the plain reading
# Their stub driver is $R/hunt-G-stubs: make_libcuda_stub.sh over `stack` and these images (deep_gemm's
# build asks libcuda.so.1 for cuTensorMapEncodeTiled, which no stack-* object does; the stack's
# own stub, shared by the other tests' recorded truths, is left as it is).
HUNT_G_DL="$R/hunt-G-dl"; HUNT_G_REPORTS="$R/hunt-G-reports"; GSTUBS="$R/hunt-G-stubs"
KT_KERNEL=0.7.2; TMS=0.0.10; XFORMERS=0.0.34; HUMMING=0.1.20
NVRTC12=12.9.86; CUDART12=12.9.79
HUNT_G_IMAGES="G-ktkernel G-ktkernel-cu12 G-plain"
HUNT_G_PLAIN="deep_gemm,kt_kernel,torch_memory_saver,xformers,humming,sgl_kernel,deep_ep,flashinfer,nixl_ep"
fetch_g() { "$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_G_DL" "$@"; }
g_hunt_variant() {
  local v="$R/hunt-$1"
  case "$1" in
    G-ktkernel)
      hunt_clone "$1" "$BASE" || return 0
      pipi "$v" --no-deps "$(fetch_g kt-kernel "$KT_KERNEL" cp311 x86_64)"
      hunt_mark "$1" "kt-kernel $KT_KERNEL --no-deps";;
    G-ktkernel-cu12)
      hunt_clone "$1" "$R/hunt-G-ktkernel" || return 0
      pipi "$v" --no-deps --target "$v/cu12" "$(fetch_g nvidia-cuda-nvrtc-cu12 "$NVRTC12" x86_64)" \
        "$(fetch_g nvidia-cuda-runtime-cu12 "$CUDART12" x86_64)"
      hunt_mark "$1" "hunt-G-ktkernel + nvidia-cuda-nvrtc-cu12 $NVRTC12, -runtime-cu12 $CUDART12 in cu12/";;
    G-plain)
      hunt_clone "$1" "$BASE" || return 0
      pipi "$v" --no-deps "$(fetch_g torch-memory-saver "$TMS" abi3 x86_64)" \
        "$(fetch_g xformers "$XFORMERS" abi3 manylinux_2_28_x86_64)" \
        "$(fetch_g humming-kernels "$HUMMING" abi3 x86_64)"
      hunt_mark "$1" "torch-memory-saver $TMS, xformers $XFORMERS, humming-kernels $HUMMING --no-deps";;
  esac
}
g_probe() {  # g_probe <image dir> <report name> [VAR=value...]
  local v="$1" name="$2"; shift 2; mkdir -p "$HUNT_G_REPORTS"
  env -u PYTHONPATH -u VIRTUAL_ENV LD_LIBRARY_PATH="$GSTUBS" CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB="$GSTUBS/nvml" \
    MOONCAKE_PG_JIT_DIR="$PGJIT/$name" FLASHINFER_WORKSPACE_BASE="$R/stack-fi" PROBE_PLAIN="$HUNT_G_PLAIN" "$@" \
    "$v/bin/python" "$HERE/probe_stack.py" > "$HUNT_G_REPORTS/$name.json.tmp" && mv -f "$HUNT_G_REPORTS/$name.json.tmp" "$HUNT_G_REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_G_REPORTS/$name.json" >&2
}
if [ "$HUNT_G" = 1 ]; then
  mkdir -p "$HUNT_G_DL" "$HUNT_G_REPORTS"
  if [ "$PROBE_ONLY" = 0 ]; then for n in $HUNT_G_IMAGES; do timed g_hunt_variant "$n"; done; fi
  if [ "$NO_PROBE" = 0 ]; then
    gsps=("$(sp_of "$BASE")"); for n in $HUNT_G_IMAGES; do gsps+=("$(sp_of "$R/hunt-$n")"); done
    "$HERE/make_libcuda_stub.sh" "$GSTUBS" "${gsps[@]}" >&2
    timed g_probe "$BASE" G-stack
    for n in $HUNT_G_IMAGES; do [ -x "$R/hunt-$n/bin/python" ] && timed g_probe "$R/hunt-$n" "$n"; done
    cu12="$R/hunt-G-ktkernel-cu12/cu12/nvidia"
    [ -d "$cu12" ] && timed g_probe "$R/hunt-G-ktkernel-cu12" G-ktkernel-cu12-ldpath \
      LD_LIBRARY_PATH="$GSTUBS:$cu12/cuda_nvrtc/lib:$cu12/cuda_runtime/lib"
  fi
fi

# ---- hunt-H-* images (--hunt-h; tests/test_image_hunt_h.py) --------------------------------------
# A CUDA 12 worker: every `stack*` image is CUDA 13 (torch 2.14.1); the index's torch is a CUDA 12
# build up to 2.10.0. Source: ../shared/tools/realimg/build.sh's venv-rpath (torch 2.10.0, the
# index's default CUDA 12 build; mooncake-transfer-engine 0.3.10, whose mooncake.ep loads
# ep_2_10_0; sglang 0.5.10 --no-deps), never changed here. Each image a hard-link copy changed
# with its own pip (wheels by exact version and sha256 in $R/hunt-H-dl), probed by
# probe_stack.py into $R/hunt-H-reports/<name>.json on a stub driver of its own
# ($R/hunt-H-stubs: make_libcuda_stub.sh over these images):
#   hunt-H-worker     what SGLang 0.5.10's Requires-Dist pins beside it: sglang-kernel $H_KERNEL
#                     (no Requires-Dist; CUDA 12 builds), flashinfer-python $H_FI with its own
#                     dependencies, flashinfer-cubin $H_FI (SGLang 0.5.10 pins torch 2.9.1: the
#                     base's 2.10.0 is not its pin). No nixl release has a torch210 build and
#                     every sgl-deep-ep pins a CUDA 13 torch (the KB), so no backend is added here
#   hunt-H-nixl151    + nixl + nixl-cu12 $NIXL (builds for torch 2.11-2.13)
#   hunt-H-nixl130    + nixl + nixl-cu12 1.3.0 (one plain build: nixl_ep_cu12/nixl_ep_cpp)
#   hunt-H-nixl120    + nixl-cu12 1.2.0 (one plain build in nixl_ep/ itself)
#   hunt-H-metacu13   + nixl + nixl-cu13 $NIXL only: the meta dispatcher beside a CUDA 12 torch
#   hunt-H-torch291   hunt-H-nixl130 with torch $H_TORCH_PIN --no-deps (SGLang 0.5.10's own pin;
#                     mooncake 0.3.10 has no ep_2_9_1)
#   hunt-H-kernel048  sglang-kernel $KERNEL_OLD (CUDA 13, pins torch 2.13.0) instead of $H_KERNEL
#   hunt-H-kernel0321 sgl-kernel $KERNEL_03X (CUDA 12, SGLang 0.5.9's) instead of sglang-kernel
#   hunt-H-deepep     + sgl-deep-ep 0.1.0 --no-deps (a CUDA 13 build pinning torch 2.13.0)
HUNT_H_DL="$R/hunt-H-dl"; HUNT_H_REPORTS="$R/hunt-H-reports"; HSTUBS="$R/hunt-H-stubs"
H_BASE="$R/venv-rpath"; H_KERNEL=0.4.1; H_FI=0.6.7.post2; H_TORCH_PIN=2.9.1
HUNT_H_IMAGES="H-worker H-nixl151 H-nixl130 H-nixl120 H-metacu13 H-torch291 H-kernel048 H-kernel0321 H-deepep"
# fetch_h <name> <version> [substring...]: a wheel another hunt already fetched (sha256 checked
# by fetch_wheel.py in that folder), else fetched into $HUNT_H_DL
fetch_h() {
  local d n; n=$(echo "$1" | tr '-' '_')
  for d in "$DL" "$R/hunt-A-dl" "$R/hunt-C-dl" "$HUNT_H_DL"; do
    if ls "$d/$n-$2-"*.whl >/dev/null 2>&1; then "$PYBASE" "$TOOLS/fetch_wheel.py" "$d" "$@"; return; fi
  done
  "$PYBASE" "$TOOLS/fetch_wheel.py" "$HUNT_H_DL" "$@"
}
h_hunt_variant() {
  local v="$R/hunt-$1"
  case "$1" in
    H-worker)
      [ -f "$H_BASE/.realimg-variant" ] || { log "hunt-H-worker needs $H_BASE (build.sh)"; return 1; }
      hunt_clone "$1" "$H_BASE" || return 0
      pipi "$v" "$(fetch_h sglang-kernel "$H_KERNEL" abi3 x86_64)" "$(fetch_h flashinfer-python "$H_FI")"
      pipi "$v" --no-deps "$(fetch_h flashinfer-cubin "$H_FI")"
      hunt_mark "$1" "sglang-kernel $H_KERNEL, flashinfer-python $H_FI (deps), flashinfer-cubin $H_FI";;
    H-nixl151)
      hunt_clone "$1" "$R/hunt-H-worker" || return 0
      pipi "$v" --no-deps "$(fetch_h nixl "$NIXL")" "$(fetch_h nixl-cu12 "$NIXL")"
      hunt_mark "$1" "nixl, nixl-cu12 $NIXL";;
    H-nixl130)
      hunt_clone "$1" "$R/hunt-H-worker" || return 0
      pipi "$v" --no-deps "$(fetch_h nixl 1.3.0)" "$(fetch_h nixl-cu12 1.3.0)"
      hunt_mark "$1" "nixl, nixl-cu12 1.3.0";;
    H-nixl120)
      hunt_clone "$1" "$R/hunt-H-worker" || return 0
      pipi "$v" --no-deps "$(fetch_h nixl-cu12 1.2.0)"
      hunt_mark "$1" "nixl-cu12 1.2.0";;
    H-metacu13)
      hunt_clone "$1" "$R/hunt-H-worker" || return 0
      pipi "$v" --no-deps "$(fetch_h nixl "$NIXL")" "$(fetch_h nixl-cu13 "$NIXL")"
      hunt_mark "$1" "nixl, nixl-cu13 $NIXL (CUDA 13 nixl, CUDA 12 torch)";;
    H-torch291)
      hunt_clone "$1" "$R/hunt-H-nixl130" || return 0
      pipi "$v" --no-deps "$(fetch_h torch "$H_TORCH_PIN")"
      hunt_mark "$1" "hunt-H-nixl130 with torch $H_TORCH_PIN --no-deps";;
    H-kernel048)
      hunt_clone "$1" "$R/hunt-H-worker" || return 0
      pipv "$v" uninstall -y sglang-kernel
      pipi "$v" --no-deps "$(fetch_h sglang-kernel "$KERNEL_OLD" abi3 x86_64)"
      hunt_mark "$1" "sglang-kernel $KERNEL_OLD instead of $H_KERNEL";;
    H-kernel0321)
      hunt_clone "$1" "$R/hunt-H-worker" || return 0
      pipv "$v" uninstall -y sglang-kernel
      pipi "$v" --no-deps "$(fetch_h sgl-kernel "$KERNEL_03X" abi3 x86_64)"
      hunt_mark "$1" "sglang-kernel uninstalled; sgl-kernel $KERNEL_03X";;
    H-deepep)
      hunt_clone "$1" "$R/hunt-H-worker" || return 0
      pipi "$v" --no-deps "$(fetch_h sgl-deep-ep 0.1.0 cp311 x86_64)"
      hunt_mark "$1" "sgl-deep-ep 0.1.0 --no-deps";;
  esac
}
h_probe() {  # h_probe <image dir> <report name> [VAR=value...]
  local v="$1" name="$2"; shift 2; mkdir -p "$HUNT_H_REPORTS" "$R/hunt-fi"
  env -u PYTHONPATH -u VIRTUAL_ENV LD_LIBRARY_PATH="$HSTUBS" CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB="$HSTUBS/nvml" \
    FLASHINFER_WORKSPACE_BASE="$R/hunt-fi" PROBE_NAMES=1 "$@" \
    "$v/bin/python" "$HERE/probe_stack.py" > "$HUNT_H_REPORTS/$name.json.tmp" && mv -f "$HUNT_H_REPORTS/$name.json.tmp" "$HUNT_H_REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_H_REPORTS/$name.json" >&2
}
if [ "$HUNT_H" = 1 ]; then
  mkdir -p "$HUNT_H_DL" "$HUNT_H_REPORTS"
  if [ "$PROBE_ONLY" = 0 ]; then for n in $HUNT_H_IMAGES; do timed h_hunt_variant "$n"; done; fi
  if [ "$NO_PROBE" = 0 ]; then
    hsps=(); for n in $HUNT_H_IMAGES; do [ -d "$R/hunt-$n" ] && hsps+=("$(sp_of "$R/hunt-$n")"); done
    [ ${#hsps[@]} -gt 0 ] && "$HERE/make_libcuda_stub.sh" "$HSTUBS" "${hsps[@]}" >&2
    for n in $HUNT_H_IMAGES; do [ -x "$R/hunt-$n/bin/python" ] && timed h_probe "$R/hunt-$n" "$n"; done
  fi
fi

# ---- hunt-D-* image roots (--hunt-d; tests/test_image_hunt_d.py) --------------------------------
# The image's own preloads (issue 39: LD_PRELOAD in its config's Env, /etc/ld.so.preload), which
# ld.so maps at the interpreter's start before anything it needs, in the global scope. One root,
# hunt-A-root-stack hard-linked, with nvidia-nccl-cu12's libnccl.so.2 (hunt-C-ncclcu12's, hard
# linked) at /opt/nccl12 and the probe copied in; probed in a chroot (CUDA_HOME set) with:
#   D-root-nccl12-preload    LD_PRELOAD=/opt/nccl12/libnccl.so.2 (a CUDA 12 NCCL under the cu13 torch)
#   D-root-missing-preload   LD_PRELOAD=/opt/none.so (ld.so: "cannot be preloaded ... ignored")
#   D-root-nccl12-file       no LD_PRELOAD; /etc/ld.so.preload naming /opt/nccl12/libnccl.so.2
#                            (written for that probe only, removed after it)
# and hunt-D-root-nonvshmem: hunt-A-root-stack without nvidia-nvshmem-cu13 (its folder and
# dist-info removed, as pip uninstall does), its libnvshmem_host.so.3 kept at /opt/nvshmem
# (torch and deep_ep need it by that soname; nothing searches /opt/nvshmem), probed with:
#   D-nonvshmem              nothing preloaded (the control: every import fails)
#   D-nonvshmem-preload      LD_PRELOAD=/opt/nvshmem/libnvshmem_host.so.3 (answers the soname)
#   D-nonvshmem-name         LD_PRELOAD=libnvshmem_host.so.3 (a name: searched, not found, ignored)
#   D-nonvshmem-file         /etc/ld.so.preload naming /opt/nvshmem/libnvshmem_host.so.3
# and hunt-D-root-noffi: hunt-A-root-stack without the system libffi (the standard library's
# _ctypes needs libffi.so.8; torch/__init__.py imports ctypes at its top level), probed as is:
#   D-noffi
HUNT_D_REPORTS="$R/hunt-D-reports"
d_probe() {  # d_probe <root> <report name> [VAR=value...]: probe_stack.py in that chroot
  local root="$1" name="$2" chroot; shift 2; chroot=$(command -v chroot)
  env -i PATH=/opt/venv/bin:/usr/bin:/bin LD_LIBRARY_PATH=/stubs CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB=/stubs/nvml HOME=/tmp CUDA_HOME=/usr/local/cuda PROBE_NAMES=1 "$@" \
    unshare -m --propagation private /bin/bash -c "mount -t proc proc '$root/proc' && mount --rbind /dev '$root/dev' && exec '$chroot' '$root' /opt/venv/bin/python /probe_stack.py" \
    > "$HUNT_D_REPORTS/$name.json.tmp" && mv -f "$HUNT_D_REPORTS/$name.json.tmp" "$HUNT_D_REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_D_REPORTS/$name.json" >&2
}
d_root() {
  local root="$R/hunt-D-root" nccl="$R/hunt-C-ncclcu12/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
  [ -x "$R/hunt-A-root-stack/opt/venv/bin/python" ] || { log "hunt-D-root needs hunt-A-root-stack (--hunt-nixl)"; return 1; }
  [ -f "$nccl" ] || { log "hunt-D-root needs hunt-C-ncclcu12 (--hunt-c)"; return 1; }
  if [ ! -f "$root/.hunt-variant" ] || [ "$REBUILD" = 1 ]; then
    rm -rf "$root"; cp -al "$R/hunt-A-root-stack" "$root"
    mkdir -p "$root/opt/nccl12"; ln -f "$nccl" "$root/opt/nccl12/libnccl.so.2"
    rm -f "$root/etc/ld.so.preload"
    cp "$HERE/probe_stack.py" "$root/probe_stack.py.tmp" && mv -f "$root/probe_stack.py.tmp" "$root/probe_stack.py"
    echo "hunt-A-root-stack with nvidia-nccl-cu12's libnccl.so.2 at /opt/nccl12" > "$root/.hunt-variant"
  fi
}
d_root_nonvshmem() {
  local root="$R/hunt-D-root-nonvshmem" site="opt/venv/lib/python3.11/site-packages"
  [ -x "$R/hunt-A-root-stack/opt/venv/bin/python" ] || { log "hunt-D-root-nonvshmem needs hunt-A-root-stack (--hunt-nixl)"; return 1; }
  if [ ! -f "$root/.hunt-variant" ] || [ "$REBUILD" = 1 ]; then
    rm -rf "$root"; cp -al "$R/hunt-A-root-stack" "$root"
    mkdir -p "$root/opt/nvshmem"
    ln -f "$root/$site/nvidia/nvshmem/lib/libnvshmem_host.so.3" "$root/opt/nvshmem/libnvshmem_host.so.3"
    rm -rf "$root/$site/nvidia/nvshmem" "$root/$site"/nvidia_nvshmem_cu13-*.dist-info "$root/etc/ld.so.preload"
    cp "$HERE/probe_stack.py" "$root/probe_stack.py.tmp" && mv -f "$root/probe_stack.py.tmp" "$root/probe_stack.py"
    echo "hunt-A-root-stack without nvidia-nvshmem-cu13; its libnvshmem_host.so.3 at /opt/nvshmem" > "$root/.hunt-variant"
  fi
}
d_root_noffi() {
  local root="$R/hunt-D-root-noffi"
  [ -x "$R/hunt-A-root-stack/opt/venv/bin/python" ] || { log "hunt-D-root-noffi needs hunt-A-root-stack (--hunt-nixl)"; return 1; }
  if [ ! -f "$root/.hunt-variant" ] || [ "$REBUILD" = 1 ]; then
    rm -rf "$root"; cp -al "$R/hunt-A-root-stack" "$root"
    rm -f "$root"/usr/lib/x86_64-linux-gnu/libffi.so* "$root/etc/ld.so.preload"
    cp "$HERE/probe_stack.py" "$root/probe_stack.py.tmp" && mv -f "$root/probe_stack.py.tmp" "$root/probe_stack.py"
    echo "hunt-A-root-stack without libffi" > "$root/.hunt-variant"
  fi
}
d_with_file() {  # d_with_file <root> <report name> <entry>: probed with /etc/ld.so.preload naming it
  printf '# hunt-D\n%s\n' "$3" > "$1/etc/ld.so.preload.tmp" && mv -f "$1/etc/ld.so.preload.tmp" "$1/etc/ld.so.preload"
  d_probe "$1" "$2"; local rc=$?; rm -f "$1/etc/ld.so.preload"; return $rc
}
if [ "$HUNT_D" = 1 ]; then
  mkdir -p "$HUNT_D_REPORTS"
  if [ "$PROBE_ONLY" = 0 ]; then timed d_root; timed d_root_nonvshmem; timed d_root_noffi; fi
  if [ "$NO_PROBE" = 0 ] && [ -f "$R/hunt-D-root/.hunt-variant" ]; then
    timed d_probe "$R/hunt-D-root" D-root-nccl12-preload LD_PRELOAD=/opt/nccl12/libnccl.so.2
    timed d_probe "$R/hunt-D-root" D-root-missing-preload LD_PRELOAD=/opt/none.so
    timed d_with_file "$R/hunt-D-root" D-root-nccl12-file /opt/nccl12/libnccl.so.2
  fi
  if [ "$NO_PROBE" = 0 ] && [ -f "$R/hunt-D-root-nonvshmem/.hunt-variant" ]; then
    root="$R/hunt-D-root-nonvshmem"
    timed d_probe "$root" D-nonvshmem
    timed d_probe "$root" D-nonvshmem-preload LD_PRELOAD=/opt/nvshmem/libnvshmem_host.so.3
    timed d_probe "$root" D-nonvshmem-name LD_PRELOAD=libnvshmem_host.so.3
    timed d_with_file "$root" D-nonvshmem-file /opt/nvshmem/libnvshmem_host.so.3
  fi
  if [ "$NO_PROBE" = 0 ] && [ -f "$R/hunt-D-root-noffi/.hunt-variant" ]; then
    timed d_probe "$R/hunt-D-root-noffi" D-noffi
  fi
fi

# ---- hunt-I-* images (--hunt-i; tests/test_image_hunt_i.py) --------------------------------------
# What the worker's environment and the code `site` runs at start change, each a hard-link copy
# of `stack` (or of hunt-A-root-stack for an image root) with a few small files of its own; the
# stale copy is stack-kernel048's sgl_kernel/ (sglang-kernel 0.4.8, built for torch 2.13.0),
# hard-linked into $R/hunt-I-alt/stale, the good one stack's into $R/hunt-I-alt/good:
#   hunt-I-pthfront   a .pth line `import sys; sys.path.insert(0, '<alt>/stale')`; probed as is
#                     (I-pthfront) and with PYTHONPATH=<alt>/good (I-pthfront-pythonpath)
#   hunt-I-usersite   include-system-site-packages = true; probed with PYTHONUSERBASE naming a
#                     user base whose site folder holds the stale copy and a usercustomize.py that
#                     puts that folder first (I-usersite), the same with PYTHONNOUSERSITE=1
#                     (I-usersite-off), and a user base holding the stale copy only (I-usersite-plain)
#   hunt-I-pthcdll    a .pth line importing a module that loads <alt>/oldstdcxx/libstdc++.so.6 (gcc:
#                     GLIBCXX up to 3.4.19 only, as tests/test_image_classes.py builds it) with
#                     ctypes.CDLL(..., RTLD_GLOBAL) (I-pthcdll)
#   hunt-I-pthnccl    the same loading hunt-C-ncclalt's nvidia-nccl-cu13 2.32.6 libnccl.so.2 (I-pthnccl)
#   stack             probed with LD_LIBRARY_PATH also naming hunt-H-worker's CUDA 12 library
#                     folders (libcudart.so.12, nccl-cu12's libnccl.so.2...: I-cu12-ldpath)
#   hunt-I-root       hunt-A-root-stack with /opt/stale, /opt/good and the .pth line of
#                     hunt-I-pthfront naming /opt/stale; probed in a chroot (CUDA_HOME set) as is
#                     (I-root-pthfront) and with PYTHONPATH=/opt/good (I-root-pthfront-pythonpath)
#   hunt-I-root2      the same without the .pth line, probed with PYTHONPATH=opt/stale, a relative
#                     entry (the chroot's working folder is /: I-root2-relpath)
HUNT_I_REPORTS="$R/hunt-I-reports"; IALT="$R/hunt-I-alt"
i_alt() {
  local sp k048; sp=$(sp_of "$BASE"); k048=$(sp_of "$R/stack-kernel048")
  [ -d "$k048/sgl_kernel" ] || { log "hunt-I needs stack-kernel048 (stack.sh --only kernel048)"; return 1; }
  if [ ! -f "$IALT/.ready" ] || [ "$REBUILD" = 1 ]; then
    rm -rf "$IALT"; mkdir -p "$IALT/stale" "$IALT/good" "$IALT/oldstdcxx"
    cp -al "$k048/sgl_kernel" "$IALT/stale/"; cp -al "$sp/sgl_kernel" "$IALT/good/"
    "$PYBASE" -c '
import sys
from pathlib import Path
d = Path(sys.argv[1])
names = ["GLIBCXX_3.4", *(f"GLIBCXX_3.4.{i}" for i in range(1, 20)), "CXXABI_1.3",
         *(f"CXXABI_1.3.{i}" for i in range(1, 16))]
syms = ["moonpin_" + n.replace(".", "_") for n in names]
loc = ["local: *; "] + [""] * (len(names) - 1)
(d / "v.map").write_text("".join(f"{n} {{ global: {s}; {l}}};\n"
                                 for n, s, l in zip(names, syms, loc)))
(d / "s.c").write_text("".join(f"int {s}(void) {{ return {i}; }}\n" for i, s in enumerate(syms)))
' "$IALT/oldstdcxx"
    gcc -shared -fPIC -o "$IALT/oldstdcxx/libstdc++.so.6" -Wl,-soname,libstdc++.so.6 \
      "-Wl,--version-script=$IALT/oldstdcxx/v.map" "$IALT/oldstdcxx/s.c"
    for ub in user user-plain; do
      mkdir -p "$IALT/$ub/lib/python3.11/site-packages"
      cp -al "$k048/sgl_kernel" "$IALT/$ub/lib/python3.11/site-packages/"
    done
    echo "import sys; sys.path.insert(0, '$IALT/user/lib/python3.11/site-packages')" \
      > "$IALT/user/lib/python3.11/site-packages/usercustomize.py"
    touch "$IALT/.ready"
  fi
}
i_preload_module() {  # i_preload_module <image dir> <library path>: a .pth line whose module loads it
  local sp; sp=$(sp_of "$1")
  printf "import ctypes\nctypes.CDLL('%s', mode=ctypes.RTLD_GLOBAL)\n" "$2" > "$sp/hunti_preload.py"
  echo "import hunti_preload" > "$sp/hunti_preload.pth"
}
i_variant() {
  local v="$R/hunt-$1" sp; sp=$(sp_of "$R/hunt-$1")
  case "$1" in
    I-pthfront)
      hunt_clone "$1" "$BASE" || return 0
      echo "import sys; sys.path.insert(0, '$IALT/stale')" > "$sp/hunti_front.pth"
      hunt_mark "$1" "a .pth line putting $IALT/stale first";;
    I-usersite)
      hunt_clone "$1" "$BASE" || return 0
      sed 's/^include-system-site-packages = false/include-system-site-packages = true/' \
        "$v/pyvenv.cfg" > "$v/pyvenv.cfg.tmp" && mv -f "$v/pyvenv.cfg.tmp" "$v/pyvenv.cfg"
      hunt_mark "$1" "include-system-site-packages = true";;
    I-pthcdll)
      hunt_clone "$1" "$BASE" || return 0
      i_preload_module "$v" "$IALT/oldstdcxx/libstdc++.so.6"
      hunt_mark "$1" "a .pth line loading an old libstdc++.so.6 with ctypes";;
    I-pthnccl)
      local nccl="$R/hunt-C-ncclalt/nccl-alt/nvidia/nccl/lib/libnccl.so.2"
      [ -f "$nccl" ] || { log "hunt-I-pthnccl needs hunt-C-ncclalt (--hunt-c)"; return 0; }
      hunt_clone "$1" "$BASE" || return 0
      i_preload_module "$v" "$nccl"
      hunt_mark "$1" "a .pth line loading another libnccl.so.2 with ctypes";;
  esac
}
i_root() {  # i_root <name> <with the .pth line: 1/0>
  local root="$R/hunt-$1" site="opt/venv/lib/python3.11/site-packages"
  [ -x "$R/hunt-A-root-stack/opt/venv/bin/python" ] || { log "hunt-$1 needs hunt-A-root-stack (--hunt-nixl)"; return 0; }
  if [ ! -f "$root/.hunt-variant" ] || [ "$REBUILD" = 1 ]; then
    rm -rf "$root"; cp -al "$R/hunt-A-root-stack" "$root"
    mkdir -p "$root/opt/stale" "$root/opt/good"
    cp -al "$IALT/stale/sgl_kernel" "$root/opt/stale/"; cp -al "$IALT/good/sgl_kernel" "$root/opt/good/"
    if [ "$2" = 1 ]; then echo "import sys; sys.path.insert(0, '/opt/stale')" > "$root/$site/hunti_front.pth"; fi
    cp "$HERE/probe_stack.py" "$root/probe_stack.py.tmp" && mv -f "$root/probe_stack.py.tmp" "$root/probe_stack.py"
    echo "hunt-A-root-stack with /opt/stale, /opt/good (.pth line: $2)" > "$root/.hunt-variant"
  fi
}
i_probe() {  # i_probe <image dir> <report name> [VAR=value...]: probe_stack.py with that environment
  local v="$1" name="$2"; shift 2
  env -u PYTHONPATH -u VIRTUAL_ENV -u PYTHONUSERBASE -u PYTHONNOUSERSITE LD_LIBRARY_PATH="$STUBS" CUDA_VISIBLE_DEVICES= \
    PROBE_NVML_STUB="$STUBS/nvml" MOONCAKE_PG_JIT_DIR="$PGJIT/$(basename "$v")" FLASHINFER_WORKSPACE_BASE="$R/stack-fi" "$@" \
    "$v/bin/python" "$HERE/probe_stack.py" > "$HUNT_I_REPORTS/$name.json.tmp" \
    && mv -f "$HUNT_I_REPORTS/$name.json.tmp" "$HUNT_I_REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_I_REPORTS/$name.json" >&2
}
i_root_probe() {  # i_root_probe <root> <report name> [VAR=value...]: probe_stack.py in that chroot
  local root="$1" name="$2" chroot; shift 2; chroot=$(command -v chroot)
  env -i PATH=/opt/venv/bin:/usr/bin:/bin LD_LIBRARY_PATH=/stubs CUDA_VISIBLE_DEVICES= PROBE_NVML_STUB=/stubs/nvml HOME=/tmp CUDA_HOME=/usr/local/cuda "$@" \
    unshare -m --propagation private /bin/bash -c "mount -t proc proc '$root/proc' && mount --rbind /dev '$root/dev' && exec '$chroot' '$root' /opt/venv/bin/python /probe_stack.py" \
    > "$HUNT_I_REPORTS/$name.json.tmp" && mv -f "$HUNT_I_REPORTS/$name.json.tmp" "$HUNT_I_REPORTS/$name.json"
  "$PYBASE" "$HERE/probe_stack.py" --summary "$HUNT_I_REPORTS/$name.json" >&2
}
if [ "$HUNT_I" = 1 ]; then
  mkdir -p "$HUNT_I_REPORTS"
  if [ "$PROBE_ONLY" = 0 ]; then
    i_alt
    for n in I-pthfront I-usersite I-pthcdll I-pthnccl; do timed i_variant "$n"; done
    timed i_root I-root 1; timed i_root I-root2 0
  fi
  if [ "$NO_PROBE" = 0 ]; then
    if [ -f "$R/hunt-I-pthfront/.hunt-variant" ]; then
      timed i_probe "$R/hunt-I-pthfront" I-pthfront
      timed i_probe "$R/hunt-I-pthfront" I-pthfront-pythonpath PYTHONPATH="$IALT/good"
    fi
    if [ -f "$R/hunt-I-usersite/.hunt-variant" ]; then
      timed i_probe "$R/hunt-I-usersite" I-usersite PYTHONUSERBASE="$IALT/user"
      timed i_probe "$R/hunt-I-usersite" I-usersite-off PYTHONUSERBASE="$IALT/user" PYTHONNOUSERSITE=1
      timed i_probe "$R/hunt-I-usersite" I-usersite-plain PYTHONUSERBASE="$IALT/user-plain"
    fi
    if [ -f "$R/hunt-I-pthcdll/.hunt-variant" ]; then timed i_probe "$R/hunt-I-pthcdll" I-pthcdll; fi
    if [ -f "$R/hunt-I-pthnccl/.hunt-variant" ]; then timed i_probe "$R/hunt-I-pthnccl" I-pthnccl; fi
    cu12=$(ls -d "$R"/hunt-H-worker/lib/python3.11/site-packages/nvidia/*/lib 2>/dev/null | paste -sd: || true)
    if [ -n "$cu12" ]; then timed i_probe "$BASE" I-cu12-ldpath LD_LIBRARY_PATH="$STUBS:$cu12"; fi
    if [ -f "$R/hunt-I-root/.hunt-variant" ]; then
      timed i_root_probe "$R/hunt-I-root" I-root-pthfront
      timed i_root_probe "$R/hunt-I-root" I-root-pthfront-pythonpath PYTHONPATH=/opt/good
    fi
    if [ -f "$R/hunt-I-root2/.hunt-variant" ]; then
      timed i_root_probe "$R/hunt-I-root2" I-root2-relpath PYTHONPATH=opt/stale
    fi
  fi
fi

# ---- hunt-J-* images (--hunt-j; tests/test_image_hunt_j.py) --------------------------------------
# What hunt I left: a library the site code loads that makes an `undefined symbol` (not a missing
# version), usercustomize's code, an image root's user site folder. The library is $R/hunt-J-alt/
# oldc10/libc10.so (gcc: soname libc10.so, none of torch's symbols), which ld.so takes for torch's
# own libc10.so once it is loaded (a DT_NEEDED matching a loaded object is not searched again):
#   hunt-J-pthundef   stack + a .pth line `import huntj_preload`, whose module loads it with
#                     ctypes.CDLL(..., RTLD_GLOBAL) (J-pthundef)
#   hunt-J-usersite   stack with include-system-site-packages = true; probed with PYTHONUSERBASE
#                     on $R/hunt-J-alt/user, whose usercustomize.py loads it the same way
#                     (J-usercdll), and with PYTHONNOUSERSITE=1 too (J-usercdll-off)
#   hunt-J-root-user  hunt-A-root-stack, its /opt/venv with include-system-site-packages = true,
#                     /opt/oldc10/libc10.so and /root/.local/lib/python3.11/site-packages/
#                     usercustomize.py loading it; probed in a chroot with HOME=/root
#                     (J-root-user), HOME=/root PYTHONNOUSERSITE=1 (J-root-user-off), and HOME=/
#                     (what runc sets with no HOME in the Env and no /etc/passwd: J-root-user-slash)
HUNT_J_REPORTS="$R/hunt-J-reports"; JALT="$R/hunt-J-alt"
j_alt() {
  if [ ! -f "$JALT/.ready" ] || [ "$REBUILD" = 1 ]; then
    rm -rf "$JALT"; mkdir -p "$JALT/oldc10" "$JALT/user/lib/python3.11/site-packages"
    echo 'int moonpin_old_c10(void) { return 1; }' > "$JALT/oldc10/s.c"
    gcc -shared -fPIC -o "$JALT/oldc10/libc10.so" -Wl,-soname,libc10.so "$JALT/oldc10/s.c"
    printf "import ctypes\nctypes.CDLL('%s', mode=ctypes.RTLD_GLOBAL)\n" "$JALT/oldc10/libc10.so" \
      > "$JALT/user/lib/python3.11/site-packages/usercustomize.py"
    touch "$JALT/.ready"
  fi
}
j_system_site() {  # j_system_site <pyvenv.cfg>: include-system-site-packages = true (a new file)
  sed 's/^include-system-site-packages = false/include-system-site-packages = true/' "$1" > "$1.tmp" \
    && rm -f "$1" && mv -f "$1.tmp" "$1"
}
j_variant() {
  local v="$R/hunt-$1" sp; sp=$(sp_of "$R/hunt-$1")
  case "$1" in
    J-pthundef)
      hunt_clone "$1" "$BASE" || return 0
      printf "import ctypes\nctypes.CDLL('%s', mode=ctypes.RTLD_GLOBAL)\n" "$JALT/oldc10/libc10.so" \
        > "$sp/huntj_preload.py"
      echo "import huntj_preload" > "$sp/huntj_preload.pth"
      hunt_mark "$1" "a .pth line loading another libc10.so with ctypes";;
    J-usersite)
      hunt_clone "$1" "$BASE" || return 0
      j_system_site "$v/pyvenv.cfg"
      hunt_mark "$1" "include-system-site-packages = true";;
    J-root-user)
      local root="$R/hunt-$1" us="root/.local/lib/python3.11/site-packages"
      [ -x "$R/hunt-A-root-stack/opt/venv/bin/python" ] || { log "hunt-$1 needs hunt-A-root-stack (--hunt-nixl)"; return 0; }
      if [ ! -f "$root/.hunt-variant" ] || [ "$REBUILD" = 1 ]; then
        rm -rf "$root"; cp -al "$R/hunt-A-root-stack" "$root"
        j_system_site "$root/opt/venv/pyvenv.cfg"
        mkdir -p "$root/opt/oldc10" "$root/$us"
        cp "$JALT/oldc10/libc10.so" "$root/opt/oldc10/"
        printf "import ctypes\nctypes.CDLL('/opt/oldc10/libc10.so', mode=ctypes.RTLD_GLOBAL)\n" \
          > "$root/$us/usercustomize.py"
        echo "hunt-A-root-stack, system site on, a usercustomize loading /opt/oldc10/libc10.so" > "$root/.hunt-variant"
      fi;;
  esac
}
if [ "$HUNT_J" = 1 ]; then
  mkdir -p "$HUNT_J_REPORTS"
  if [ "$PROBE_ONLY" = 0 ]; then
    j_alt
    for n in J-pthundef J-usersite J-root-user; do timed j_variant "$n"; done
  fi
  if [ "$NO_PROBE" = 0 ]; then
    jp() { HUNT_I_REPORTS="$HUNT_J_REPORTS" "$@"; }  # the hunt-I probes, into hunt-J's reports
    if [ -f "$R/hunt-J-pthundef/.hunt-variant" ]; then jp timed i_probe "$R/hunt-J-pthundef" J-pthundef; fi
    if [ -f "$R/hunt-J-usersite/.hunt-variant" ]; then
      jp timed i_probe "$R/hunt-J-usersite" J-usercdll PYTHONUSERBASE="$JALT/user"
      jp timed i_probe "$R/hunt-J-usersite" J-usercdll-off PYTHONUSERBASE="$JALT/user" PYTHONNOUSERSITE=1
    fi
    if [ -f "$R/hunt-J-root-user/.hunt-variant" ]; then
      jp timed i_root_probe "$R/hunt-J-root-user" J-root-user HOME=/root
      jp timed i_root_probe "$R/hunt-J-root-user" J-root-user-off HOME=/root PYTHONNOUSERSITE=1
      jp timed i_root_probe "$R/hunt-J-root-user" J-root-user-slash HOME=/
    fi
  fi
fi

log "disk: $(du -shc "$BASE" "$R"/stack-* 2>/dev/null | tail -1 | cut -f1) under $R/stack* (hard links counted once); wheels $(du -sh "$DL" | cut -f1)"
log "time: $(( $(date +%s) - T0 )) s"
