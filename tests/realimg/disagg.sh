#!/usr/bin/env bash
# The classes of `import nixl` (what SGLang's --disaggregation-transfer-backend nixl and
# --hicache-storage-backend nixl import: `from nixl._api import nixl_agent`) as hard-link
# copies of the real `stack` image (tests/realimg/stack.sh), each changed by its own pip or
# one file operation (pip unlinks before it writes, so `stack` itself is never changed):
#
#   <dest>-nometa  the meta `nixl` uninstalled (`pip uninstall nixl`: nixl/, nixl_ep/ and
#                  nixl_meta_utils.py gone; nixl-cu13 stays)
#   <dest>-nocu13  the CUDA 13 backend uninstalled, the meta kept (`pip uninstall nixl-cu13`)
#   <dest>-py312   nixl_cu13/_bindings built for another Python: its file renamed to the
#                  cpython-312 tag (the importer of 3.11 passes over it)
#   <dest>-nolib   a library the bindings link gone: nixl_cu13.libs/libgrpc-*.so.* (needed by
#                  libnixl.so of .nixl_cu13.mesonpy.libs, which _bindings links)
#
# usage: disagg.sh <stack> <dest> [class...]   (default: every class; a built one is kept)
# Nothing is fetched; about 10 MB of new files for each copy (the pip records it rewrites).
set -euo pipefail

SRC=${1:?usage: disagg.sh <stack> <dest> [class...]}
DEST=${2:?usage: disagg.sh <stack> <dest> [class...]}
shift 2
CLASSES=("$@")
[ ${#CLASSES[@]} -gt 0 ] || CLASSES=(nometa nocu13 py312 nolib)
[ -x "$SRC/bin/python" ] || { echo "disagg.sh: no $SRC/bin/python" >&2; exit 2; }
SP=lib/python3.11/site-packages

for c in "${CLASSES[@]}"; do
  v="$DEST-$c"
  [ -f "$v/.disagg-class" ] && continue
  rm -rf "$v"
  cp -al "$SRC" "$v"
  case "$c" in
    nometa) "$v/bin/python" -m pip uninstall -y -q nixl >/dev/null;;
    nocu13) "$v/bin/python" -m pip uninstall -y -q nixl-cu13 >/dev/null;;
    py312)
      b=$(ls "$v/$SP/nixl_cu13/"_bindings.cpython-311-*.so)
      mv "$b" "${b/cpython-311/cpython-312}";;
    nolib) rm "$v/$SP/nixl_cu13.libs/"libgrpc-*.so.*;;
    *) echo "disagg.sh: unknown class $c" >&2; rm -rf "$v"; exit 2;;
  esac
  echo "$c" > "$v/.disagg-class"
done
