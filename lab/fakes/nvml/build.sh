#!/usr/bin/env bash
# Build the fake NVIDIA userspace (libnvidia-ml.so.1 + nvidia-smi) into a driver-root-shaped tree.
#
#   build.sh OUTDIR [--version 570.172.08] [--cc gcc]
#
# OUTDIR/usr/lib/<multiarch>/libnvidia-ml.so.<version>   the library (SONAME libnvidia-ml.so.1)
# OUTDIR/usr/lib/<multiarch>/libnvidia-ml.so.1 -> libnvidia-ml.so.<version>   (as driver packages ship it)
# OUTDIR/usr/lib/<multiarch>/libnvidia-ml.so   -> libnvidia-ml.so.1
# OUTDIR/usr/bin/nvidia-smi
#
# OUTDIR can therefore serve directly as gpu_facts' driver_root (the GPU Operator layout), or be
# copied onto a lab node's /. The version is compiled in (FAKE_NVML_VERSION) and is what the
# library reports unless the scenario sets driver_version.
set -euo pipefail

usage() { echo "usage: $0 OUTDIR [--version X.Y[.Z]] [--cc COMPILER]" >&2; exit 2; }

[ $# -ge 1 ] || usage
out=$1; shift
version=570.172.08
cc=${CC:-gcc}
while [ $# -gt 0 ]; do
  case "$1" in
    --version) [ $# -ge 2 ] || usage; version=$2; shift 2 ;;
    --version=*) version=${1#--version=}; shift ;;
    --cc) [ $# -ge 2 ] || usage; cc=$2; shift 2 ;;
    *) usage ;;
  esac
done
if ! [[ $version =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
  echo "$0: bad driver version '$version' (expected BRANCH.MINOR[.PATCH], e.g. 570.172.08)" >&2
  exit 2
fi

src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
multiarch=$("$cc" -print-multiarch 2>/dev/null || true)
libdir=$out/usr/lib${multiarch:+/$multiarch}
mkdir -p "$libdir" "$out/usr/bin"
out=$(cd "$out" && pwd)
libdir=$out/usr/lib${multiarch:+/$multiarch}

cflags=(-std=gnu11 -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter)
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$cc" "${cflags[@]}" -fPIC -fvisibility=hidden -shared -pthread \
  -DFAKE_NVML_VERSION="\"$version\"" -Wl,-soname,libnvidia-ml.so.1 \
  -o "$tmp/libnvidia-ml.so.$version" "$src/fake_nvml.c" "$src/fake_json.c"
"$cc" "${cflags[@]}" -o "$tmp/nvidia-smi" "$src/nvidia_smi.c" -ldl

# Install by rename so a concurrent reader never sees a half-written file.
mv -f "$tmp/libnvidia-ml.so.$version" "$libdir/libnvidia-ml.so.$version"
ln -sfn "libnvidia-ml.so.$version" "$tmp/so1" && mv -fT "$tmp/so1" "$libdir/libnvidia-ml.so.1"
ln -sfn "libnvidia-ml.so.1" "$tmp/so" && mv -fT "$tmp/so" "$libdir/libnvidia-ml.so"
mv -f "$tmp/nvidia-smi" "$out/usr/bin/nvidia-smi"
echo "$libdir/libnvidia-ml.so.$version"
echo "$out/usr/bin/nvidia-smi"
