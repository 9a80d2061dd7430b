#!/usr/bin/env bash
# RocksDB's C++ compiled as two "unity" translation units (each #includes half of
# RocksDB's sources) instead of 340 files: each file of RocksDB spends most of its compile
# parsing the same standard and RocksDB headers, which a unity unit parses once. RocksDB
# keeps its sources unity-clean (its Makefile's `unity.a` target).
#
#   deploy/rocksdb-unity.sh TARGET [debug|release]
#       prints the directory holding librocksdb.a for TARGET; exits with 2 for a target
#       it has no flags for. debug (the default): -O0, for the test suite and
#       deploy/dev.sh; release: -Os, for packages (deploy/package.sh).
#
# The flags, defines and sources are those librocksdb-sys's build.rs gives cc for that
# profile in Cargo.toml (opt-level 0 for dev, "s" for release; no debug info either way),
# so the library is the same code. The result is kept under
# $CARGO_TARGET_DIR/rocksdb-unity/, keyed by the librocksdb-sys version, the flags and
# this script's text. deploy/test.sh, deploy/dev.sh and deploy/package.sh point
# librocksdb-sys at it (ROCKSDB_LIB_DIR, ROCKSDB_STATIC).
set -euo pipefail
target=$1
mode=${2:-debug}
case $mode in
  debug) opt=-O0 ;;
  release) opt=-Os ;;
  *) echo "rocksdb-unity: mode is debug or release, not $mode" >&2; exit 1 ;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target_root=${CARGO_TARGET_DIR:-$root/target}
# The cross ar (AR_<target>) and armv7's header forced into every C++ file
# (CXXFLAGS_<target>), as cargo's own build of RocksDB gets them.
# shellcheck source=cross/setup.sh
source "$root/deploy/cross/setup.sh" env

manifest=$(cargo metadata --locked --format-version 1 --filter-platform "$target" --manifest-path "$root/Cargo.toml" |
  grep -o '"manifest_path":"[^"]*/librocksdb-sys-[^"/]*/Cargo.toml"' | head -1 | cut -d'"' -f4)
[ -n "$manifest" ] || { echo "rocksdb-unity: librocksdb-sys not found by cargo metadata" >&2; exit 1; }
src=$(dirname "$manifest")
version=$(basename "$src")

cxx=clang++
defines=(-DNDEBUG=1 -DHAVE_ALIGNED_NEW -DHAVE_UINT128_EXTENSION -DOS_LINUX -DROCKSDB_PLATFORM_POSIX
         -DROCKSDB_LIB_IO_POSIX -DROCKSDB_SCHED_GETCPU_PRESENT -DROCKSDB_AUXV_GETAUXVAL_PRESENT
         -DROCKSDB_FALLOCATE_PRESENT -DROCKSDB_RANGESYNC_PRESENT)
case $target in
  x86_64-unknown-linux-gnu) arch=(-m64 --target=x86_64-unknown-linux-gnu -msse2) ;;
  aarch64-unknown-linux-gnu) arch=(--target=aarch64-unknown-linux-gnu) ;;
  armv7-unknown-linux-gnueabihf)
    arch=(--target=arm-unknown-linux-gnueabihf)
    defines+=(-D_FILE_OFFSET_BITS=64 -D_LARGEFILE64_SOURCE=1) ;;
  *) echo "rocksdb-unity: no flags for $target; cargo compiles RocksDB itself" >&2; exit 2 ;;
esac
ar_var="AR_${target//-/_}"
ar=${!ar_var:-ar}
extra_var="CXXFLAGS_${target//-/_}"
# shellcheck disable=SC2206 # the variable holds flags, split as cc splits them
extra=(${!extra_var:-})
flags=("$opt" -ffunction-sections -fdata-sections -fPIC "${arch[@]}" -I rocksdb/include/ -I rocksdb/
       -I rocksdb/third-party/gtest-1.8.1/fused-src/ -I . -std=c++20 -w -include cstdint
       "${defines[@]}" "${extra[@]}")

key=$( (cat "${BASH_SOURCE[0]}"; echo "${flags[*]}"; "$cxx" --version | head -1) | sha256sum | cut -c1-16)
out=$target_root/rocksdb-unity/$target/$version-$key
if [ ! -f "$out/librocksdb.a" ]; then
  echo "rocksdb-unity: compiling RocksDB ($version, $mode) for $target" >&2
  rm -rf "$out" && mkdir -p "$out"
  mapfile -t sources < <(grep -v '^util/build_version.cc$' "$src/rocksdb_lib_sources.txt" |
    sed 's/^[[:space:]]*//; s/[[:space:]]*$//' | grep . | sed 's|^|rocksdb/|')
  sources+=(build_version.cc)
  half=$(( (${#sources[@]} + 1) / 2 ))
  for part in 0 1; do
    printf '#include "%s"\n' "${sources[@]:part*half:half}" > "$out/unity$part.cc"
  done
  start=$(date +%s)
  pids=()
  for part in 0 1; do
    (cd "$src" && "$cxx" "${flags[@]}" -o "$out/unity$part.o" -c "$out/unity$part.cc") & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  # Under another name first: a run stopped here leaves no library that looks whole.
  "$ar" crs "$out/librocksdb.a.part" "$out/unity0.o" "$out/unity1.o"
  mv "$out/librocksdb.a.part" "$out/librocksdb.a"
  rm -f "$out"/unity*.o
  echo "rocksdb-unity: $target ($mode) done in $(( $(date +%s) - start )) s" >&2
fi
echo "$out"
