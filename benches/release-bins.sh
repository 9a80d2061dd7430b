# Sourced by the benchmark scripts. `release_bins [LOAD_TOOL...]` sets `bin` to a directory
# holding the release `oedd` and `oedd-tools` (which runs `oedd bench`, the S3 load) and the named load tools of
# oed-benches. They are built in the same cache as CI and the other scripts (RocksDB's C++
# is built once), unless BIN_DIR names a directory of prebuilt ones, e.g. to compare two
# builds in turn. They are linked as packages are, with the code a drive runs placed
# first (deploy/link-ordered; docs/drive.md, "The code pages").
release_bins() {
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/oed/target}
  local host
  host=$(rustc -vV | sed -n 's/^host: //p')
  export "CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$host")_LINKER=$(deploy/link-ordered --install)"
  export CODE_ORDER_FILE=$PWD/deploy/code-order.txt.gz
  # Cargo does not know the linker reads the order file: a newer one must link again.
  [ ! deploy/code-order.txt.gz -nt "$CARGO_TARGET_DIR/release/oedd" ] || touch crates/oed-daemon/src/main.rs
  if [ -n "${BIN_DIR:-}" ]; then
    bin=$BIN_DIR
    return
  fi
  local build=(-p oed-daemon --bin oedd --bin oedd-tools) tool
  if (($#)); then
    build+=(-p oed-benches)
    for tool in "$@"; do build+=(--bin "$tool"); done
  fi
  # RocksDB's C++ as the packages get it (deploy/rocksdb-unity.sh, -Os): about a minute
  # on a fresh machine instead of cargo's file-by-file build of 12 minutes or more.
  local lib status=0
  lib=$(bash deploy/rocksdb-unity.sh "$host" release) || status=$?
  case $status in
    0) ROCKSDB_LIB_DIR=$lib ROCKSDB_STATIC=1 cargo build --release --locked "${build[@]}" >&2 ;;
    2) cargo build --release --locked "${build[@]}" >&2 ;;
    *) return "$status" ;;
  esac
  bin=$CARGO_TARGET_DIR/release
}

# minio_load: builds benches/minio-load (the load made with minio-go, from the Go module
# proxy) into $CARGO_TARGET_DIR/minio-load and sets `minio_load` to it.
minio_load() {
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/oed/target}
  command -v go >/dev/null || { echo "minio-load needs Go (apt-get install golang)" >&2; return 1; }
  (cd benches/minio-load && go build -o "$CARGO_TARGET_DIR/minio-load" .) >&2
  minio_load=$CARGO_TARGET_DIR/minio-load
}

# bench_phase PHASE ARGS...: one phase (write or read) of `oedd bench` from $bin on the
# objects under the prefix BENCH_PREFIX ("load"; kept between calls: a read finds what a
# write left, a second write overwrites it), uploads signed as BENCH_SIGNING (unset:
# oedd bench's default, streaming-crc32c over http://; docs/bench.md, "How uploads are
# signed"), printed as one line:
#   PUT: X MiB/s, Y objects/s, E errors; latency ms p50 A p90 B p99 C max D
# (GET: for a read). ARGS go to oedd bench: --endpoint, --bucket, --size, --count,
# --clients, --ca-file. Credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
bench_phase() {
  local phase=$1
  shift
  # --signing only when asked for: builds before it (BIN_DIR) do not know it.
  local signing=()
  [ -z "${BENCH_SIGNING:-}" ] || signing=(--signing "$BENCH_SIGNING")
  "$bin/oedd" bench --phases "$phase" --prefix "${BENCH_PREFIX:-load}" "${signing[@]}" \
    --keep --quiet "$@" |
    awk -v p="$phase" '$1 == p && $2 ~ /^[0-9]+$/ {
      printf "%s: %s MiB/s, %s objects/s, %s errors; latency ms p50 %s p90 %s p99 %s max %s\n",
        (p == "write" ? "PUT" : "GET"), $3, $5, $11, $6, $7, $8, $9 }'
}

# uncache FILE: drops FILE's pages from the page cache (written back first), so that a
# program started from it reads it from disk as after a reboot: a binary just written
# maps more of its pages (docs/drive.md, "The code pages").
uncache() {
  sync
  python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$1"
}
