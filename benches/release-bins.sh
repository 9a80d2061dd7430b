# Sourced by the benchmark scripts. `release_bins [LOAD_TOOL...]` sets `bin` to a directory
# holding the release `oedd` and the named load tools of oed-benches. They are built in the
# same cache as CI and the other scripts (RocksDB's C++ is built once), unless BIN_DIR
# names a directory of prebuilt ones, e.g. to compare two builds in turn.
release_bins() {
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/oed/target}
  if [ -n "${BIN_DIR:-}" ]; then
    bin=$BIN_DIR
    return
  fi
  local build=(-p oed-daemon --bin oedd) tool
  if (($#)); then
    build+=(-p oed-benches)
    for tool in "$@"; do build+=(--bin "$tool"); done
  fi
  cargo build --release --locked "${build[@]}" >&2
  bin=$CARGO_TARGET_DIR/release
}
