#!/usr/bin/env bash
# Builds every GPU test and GPU binary (targets tagged "gpu") and packs them into ONE compressed archive that
# runs on the device machine (CUDA 13 and python3 with PyTorch, no Bazel, none of this machine's Debian
# libraries), small enough to travel with the device tool (working tree + carried folders <= 64 MiB):
#
#   tools/gpu_bundle.sh [--no-build] [--unpacked DIR] [OUT_DIR]   # OUT_DIR default: gpu_bundle/ (git-ignored)
#   (on the device)  tar -xf OUT_DIR/gpu_bundle.tar.xz -C /tmp && /tmp/gpu_bundle/gpu_run.sh
#
# The archive holds one folder, gpu_bundle/:
#   tests/, bench/     each binary once, not stripped: stripping host symbols saved 0.2 MiB of 11 in the
#                      archive (2026-11-30), and compute-sanitizer's host backtraces need those names
#   runfiles/<name>/lmforge/   the data files a binary's runfiles hold (fixtures, configs), without the binary;
#                      gpu_run.sh starts each binary there, as `bazel test` does
#   peers/             tools/gpu_peers/*.py (the benchmarks find them as <exe>/../peers/)
#   lib/               every shared library the binaries need, except glibc's (the device has its own, newer
#                      one), libstdc++/libgcc_s and the CUDA/NVIDIA libraries (the device's CUDA 13 ones
#                      are used); lib/REQUIRES names the newest GLIBC/GLIBCXX versions the binaries need
#   lib/cxx/           this machine's libstdc++ and libgcc_s: gpu_run.sh adds them to OUR binaries' library
#                      path only if the device's libstdc++ lacks a needed GLIBCXX version; never to python's
#   gpu_run.sh         runs it all on the device (see that file)
# --unpacked DIR also leaves an unpacked copy at DIR/gpu_bundle (DIR must be outside OUT_DIR). --no-build
# packs what the last build left. Fails if the archive plus the git working tree exceed 60 MiB. Honours
# LMF_BAZEL_OUTPUT_BASE (binaries are taken from `bazel info bazel-bin`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=1
unpacked=""
out=""
while (($#)); do
  case "$1" in
    --no-build) build=0; shift ;;
    --unpacked) unpacked="${2:?--unpacked needs a folder}"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "gpu_bundle: unknown flag '$1' (see --help)" >&2; exit 2 ;;
    *) [[ -z "$out" ]] || { echo "gpu_bundle: one OUT_DIR only" >&2; exit 2; }; out="$1"; shift ;;
  esac
done
out="$(realpath -m "${out:-$root/gpu_bundle}")"
if [[ -n "$unpacked" ]]; then
  unpacked="$(realpath -m "$unpacked")"
  # An unpacked copy inside OUT_DIR would travel with `carry` (and be deleted with OUT_DIR).
  [[ "$unpacked/" == "$out/"* ]] && { echo "gpu_bundle: --unpacked $unpacked must be outside $out" >&2; exit 2; }
fi
limit_mib=60
cd "$root"

# OUT_DIR is replaced: refuse a folder that holds anything but an earlier bundle (archive or unpacked).
bundle_names='^(gpu_bundle\.tar\..*|gpu_run\.sh|gpu_run\.log|tests|bench|runfiles|peers|lib|logs)$'
if [[ -d "$out" ]] && find "$out" -mindepth 1 -maxdepth 1 -printf '%f\n' | grep -qvE "$bundle_names"; then
  echo "gpu_bundle: $out exists and holds files that are no bundle's; give an empty or new folder" >&2
  exit 2
fi

tests=$(./bazelw query 'attr(tags, "[\[ ,]gpu[,\]]", tests(//...))' 2>/dev/null)
bins=$(./bazelw query 'attr(tags, "[\[ ,]gpu[,\]]", kind("cc_binary", //...))' 2>/dev/null)
if [[ -z "$tests$bins" ]]; then
  echo "gpu_bundle: no targets tagged gpu" >&2
  exit 1
fi
if ((build)); then
  echo "gpu_bundle: building $(echo $tests $bins | wc -w) targets" >&2
  # shellcheck disable=SC2086
  ./bazelw build $tests $bins
fi
bin_root="$(./bazelw info bazel-bin 2>/dev/null)"
[[ -d "$bin_root" ]] || { echo "gpu_bundle: bazel info bazel-bin gave no folder" >&2; exit 1; }

tmp="$(mktemp -d /tmp/gpu_bundle.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
stage="$tmp/gpu_bundle"
mkdir -p "$stage/tests" "$stage/bench" "$stage/runfiles" "$stage/peers" "$stage/lib/cxx"

copy_target() {  # label, destination folder
  local label="$1" dest="$2"
  local path="${label#//}"
  path="${path/://}"
  local bin="$bin_root/$path"
  [[ -x "$bin" ]] || { echo "gpu_bundle: $label built no executable at $bin (build first, or drop --no-build)" >&2; exit 1; }
  local name="${path//\//__}"
  cp -L "$bin" "$dest/$name"
  chmod u+w "$dest/$name"
  # Runfiles: the data files only. Left out: the binary itself, Bazel's manifests, and the peer scripts
  # (tools/gpu_peers/: found in peers/, where peer_timing.py, which they import, sits beside them).
  local rf="$bin.runfiles/lmforge"
  [[ -d "$rf" ]] || return 0
  local f rel
  while IFS= read -r -d '' f; do
    rel="${f#"$rf"/}"
    [[ "$rel" == "$path" || "$rel" == tools/gpu_peers/* || "$rel" == _solib_* ]] && continue
    case "$(basename "$rel")" in MANIFEST|_repo_mapping) continue ;; esac
    mkdir -p "$stage/runfiles/$name/lmforge/$(dirname "$rel")"
    cp -L "$f" "$stage/runfiles/$name/lmforge/$rel"
  done < <(find -L "$rf" -type f -print0)
}
for t in $tests; do copy_target "$t" "$stage/tests"; done
for b in $bins; do copy_target "$b" "$stage/bench"; done
cp tools/gpu_run.sh "$stage/gpu_run.sh"
chmod +x "$stage/gpu_run.sh"
cp tools/gpu_peers/*.py "$stage/peers/"

# Identical data files (the same fixture in several runfiles) become hard links: tar stores them once.
declare -A first_copy=()
while IFS= read -r line; do
  sum="${line%% *}" f="${line#*  }"
  if [[ -n "${first_copy[$sum]:-}" ]]; then ln -f "${first_copy[$sum]}" "$f"; else first_copy[$sum]="$f"; fi
done < <(find "$stage/runfiles" -type f -print0 | xargs -0r sha256sum)

# Shared libraries: what ldd resolves here, by class.
is_glibc() { [[ "$1" =~ ^(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libmvec)\.so\.|^ld-linux|^linux-vdso ]]; }
is_cxx() { [[ "$1" =~ ^(libstdc\+\+|libgcc_s)\.so\. ]]; }
is_cuda() { [[ "$1" =~ ^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia|nvrtc|nvJitLink|cudnn|cufft|curand|cusparse|cusolver|nvToolsExt)[^/]*\.so ]]; }
declare -A libs=() device_libs=()
missing=0
for b in "$stage"/tests/* "$stage"/bench/*; do
  while IFS= read -r line; do
    line="${line#"${line%%[![:space:]]*}"}"
    soname="${line%% *}"
    if [[ "$line" == *"not found"* ]]; then
      echo "gpu_bundle: $(basename "$b"): $soname not found here" >&2
      missing=1
      continue
    fi
    [[ "$line" == *" => "* ]] || continue
    local_path="${line#* => }"
    local_path="${local_path%% (0x*}"
    if is_glibc "$soname"; then continue
    elif is_cuda "$soname"; then device_libs[$soname]=1
    elif is_cxx "$soname"; then libs[$soname]="cxx/$soname:$local_path"
    else libs[$soname]="$soname:$local_path"; fi
  done < <(ldd "$b")
done
((missing == 0)) || { echo "gpu_bundle: unresolved libraries here; fix the build first" >&2; exit 1; }
for soname in "${!libs[@]}"; do
  entry="${libs[$soname]}"
  cp -L "${entry#*:}" "$stage/lib/${entry%%:*}"
done
# Newest symbol versions needed from glibc and libstdc++ (by the binaries and the bundled libraries).
newest() {  # prefix: the newest version of it referenced
  find "$stage/tests" "$stage/bench" "$stage/lib" -maxdepth 1 -type f -print0 |
    xargs -0 objdump -p 2>/dev/null | grep -oE "\b$1[0-9.]+\b" | sort -uV | tail -1
}
{
  echo "GLIBC $(newest GLIBC_)"
  echo "GLIBCXX $(newest GLIBCXX_)"
  echo "# from the device (not bundled): $(printf '%s\n' "${!device_libs[@]}" | sort | tr '\n' ' ')"
} >"$stage/lib/REQUIRES"

# One xz archive: on this bundle (2026-11-30) xz -9e gave 10.8 MiB, zstd -19 --long=27 12.0 MiB, and
# GNU tar on the device unpacks xz without extra tools.
rm -rf "$out"
mkdir -p "$out"
archive="$out/gpu_bundle.tar.xz"
tar -C "$tmp" --owner=0 --group=0 --numeric-owner -cf - gpu_bundle | xz -9e -T0 >"$archive"
size() { stat -c %s "$1"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "gpu_bundle: unpacked $(du -sb "$stage" | awk '{printf "%.1f MiB", $1 / 1048576}'), archive (xz -9e) $(mib "$(size "$archive")")" >&2
if [[ -n "$unpacked" ]]; then
  mkdir -p "$unpacked"
  rm -rf "$unpacked/gpu_bundle"
  tar -C "$unpacked" -xf "$archive"
fi

echo "gpu_bundle: $(ls "$stage/tests" | wc -l) tests, $(ls "$stage/bench" | wc -l) benchmarks/binaries, $(find "$stage/lib" -type f -name 'lib*' | wc -l) libraries bundled; from the device: $(printf '%s ' "${!device_libs[@]}")" >&2
echo "gpu_bundle: needs $(tr '\n' ' ' <"$stage/lib/REQUIRES" | sed 's/ #.*//') on the device" >&2
# What travels to the device: the git working tree (tracked and untracked-not-ignored files) plus the archive.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$((tree_bytes + $(size "$archive")))
echo "gpu_bundle: wrote $archive: $(mib "$(size "$archive")"); with the working tree ($(mib "$tree_bytes")) $(mib "$total") of the ${limit_mib} MiB allowed" >&2
if ((total > limit_mib * 1048576)); then
  echo "gpu_bundle: FAIL: archive + working tree exceed ${limit_mib} MiB; the device tool would refuse it" >&2
  exit 1
fi
