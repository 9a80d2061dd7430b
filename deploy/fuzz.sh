#!/usr/bin/env bash
# The fuzz targets (fuzz/), each for a bounded time: every parser of bytes from the
# network or a disk. Installs what is missing (nightly Rust, cargo-fuzz), builds the
# targets with overflow checks and debug assertions, runs each over its corpus in
# fuzz/corpus/TARGET for FUZZ_SECONDS (default 30), FUZZ_JOBS (the cores) at a time,
# and fails on a crash, leaving
# the input that crashed in fuzz/artifacts/TARGET/ (add it to the corpus with the fix:
# tests replay the corpus on stable Rust).
#
#   deploy/fuzz.sh [TARGET...]   all targets by default
# Environment: FUZZ_SECONDS, FUZZ_TOOLCHAIN (a nightly; default the dated one below),
#              ROCKSDB_LIB_DIR (a prebuilt RocksDB, as deploy/test.sh
#              passes; without it RocksDB's C++ is compiled once more for the nightly
#              build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds=${FUZZ_SECONDS:-30}
# A dated nightly, the one these targets were last built with: a newer one may not build
# what this one did.
toolchain=${FUZZ_TOOLCHAIN:-nightly-2026-10-29}
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1; then
  echo "fuzz: installing Rust $toolchain" >&2
  rustup toolchain install "$toolchain" --profile minimal >&2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked >&2
fi
targets=("$@")
if ((${#targets[@]} == 0)); then
  # Every parser. op_merge checks a numerical property (merged statistics equal one
  # pass within a tolerance) rather than a parser, and is run by hand: a random
  # rounding case it finds is a finding to study, not a reason to fail a test run.
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz | grep -vx op_merge)
fi
# Next to the other builds, so that a second run rebuilds nothing.
target_dir=${XDG_CACHE_HOME:-$HOME/.cache}/oed/fuzz-target
flags=(-O -a -s none --fuzz-dir fuzz --target-dir "$target_dir")
cargo "+$toolchain" fuzz build "${flags[@]}" >&2
# The targets run FUZZ_JOBS (the machine's cores) at a time, each on one core.
jobs_max=${FUZZ_JOBS:-$(nproc)}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
fuzz_one() {
  local t=$1
  mkdir -p "fuzz/corpus/$t"
  # -max_len: the largest input worth mutating here (a cluster map, an XML body, a few
  # stripes of a shard); -rss_limit_mb: a target that allocates without bound fails.
  if ! cargo "+$toolchain" fuzz run "${flags[@]}" "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=1024 >"$logs/$t" 2>&1; then
    grep -E -A12 "panicked|SUMMARY|ERROR" "$logs/$t" | head -40 >&2
    grep -E "Test unit written" "$logs/$t" >&2 || true
    echo "fuzz: $t crashed (the input is in fuzz/artifacts/$t/)" >&2
    return 1
  fi
  echo "fuzz: $t: $(grep -E "^Done" "$logs/$t" || echo "ran"), corpus $(find "fuzz/corpus/$t" -type f | wc -l) inputs" >&2
}
failed=0
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || failed=1; done
  ((failed == 0)) || break
  fuzz_one "$t" &
done
while (($(jobs -rp | wc -l) > 0)); do wait -n || failed=1; done
if ((failed)); then
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, $jobs_max at a time, no crash" >&2
