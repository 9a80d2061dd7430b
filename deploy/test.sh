#!/usr/bin/env bash
# OED's whole test suite, from a fresh Debian 12 machine with only the Rust toolchain:
#   1. installs what is missing (cross gcc, qemu-user, libclang; rust targets),
#   2. runs every test of the workspace on this machine, then every fuzz target for
#      FUZZ_SECONDS (30) each (deploy/fuzz.sh: nightly Rust and cargo-fuzz, installed when
#      missing; a crash fails the run), then the S3 end-to-end tests
#      (tests/s3: a real cluster driven by boto3, the aws CLI, curl and rclone, and
#      scraped by Debian's Prometheus server; tests/sdk: the same with aws-sdk-s3 for
#      Rust; the web console in Debian's headless Chromium through Selenium; Python
#      packages go into ~/.cache/oed/venv, the prometheus, rclone, s3fs, chromium and
#      chromium-driver packages come from apt, when missing), and the drive lab's tests (tests/lab: its
#      commands, and as root a real lab of namespaces and shaped links),
#   3. builds for aarch64 and armv7 and runs the erasure-code tests there under qemu-user,
#      so the ARM SIMD kernels are checked against the reference on every run, and the
#      near-data kernels' tests (oed-ops: merges equal single passes, on 32-bit too),
#   4. makes the Debian packages for amd64, arm64 and armhf (deploy/package.sh) and
#      checks them (tests/package: fields, contents, lintian, the unit's security
#      exposure, the binaries under qemu; as root, the amd64 package installed, run as
#      its unit runs it, upgraded in place, removed and purged),
#   5. runs the peer-API smoke test against the packaged ARM binaries under qemu:
#      start, put and get a shard, stop cleanly on SIGTERM.
# Each target must pick its SIMD kernel (OED_EXPECT_KERNEL), not silently fall back.
# RocksDB's C++ is compiled once per target as two unity units (deploy/rocksdb-unity.sh:
# about a minute per target instead of 16), and librocksdb-sys links that library.
# Set CARGO_TARGET_DIR to keep build outputs between runs (.ci/run does).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=cross/setup.sh
source deploy/cross/setup.sh

# Each step says how long the run has taken so far, so a slow step shows in CI's log.
started=$SECONDS
step() { printf '\n=== [%d s] %s\n' "$((SECONDS - started))" "$*"; }

# cargo_for TARGET ARGS...: cargo, with librocksdb-sys linking the RocksDB that
# deploy/rocksdb-unity.sh built for TARGET (it keeps what it built), or compiling RocksDB
# itself where that script has no flags for TARGET.
cargo_for() {
  local t=$1 dir status=0
  shift
  dir=$(bash deploy/rocksdb-unity.sh "$t") || status=$?
  case $status in
    0) ROCKSDB_LIB_DIR=$dir ROCKSDB_STATIC=1 cargo "$@" ;;
    2) (unset ROCKSDB_LIB_DIR ROCKSDB_STATIC && cargo "$@") ;;
    *) return "$status" ;;
  esac
}
host=$(rustc -vV | sed -n 's/^host: //p')

host_kernel=portable
if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo; then host_kernel=avx2; fi
if [ "$(uname -m)" = x86_64 ] && grep -qw gfni /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
  host_kernel=gfni
fi
if [ "$(uname -m)" = aarch64 ]; then host_kernel=neon64; fi

# The shard upload seal's Poly1305: AVX-512 IFMA where the CPU has it.
host_seal=poly1305-crate
if [ "$(uname -m)" = x86_64 ] && grep -qw avx512ifma /proc/cpuinfo; then host_seal=avx512-ifma; fi

step "host tests ($(uname -m), expecting the $host_kernel kernel and the $host_seal seal)"
OED_EXPECT_KERNEL=$host_kernel OED_EXPECT_SEAL=$host_seal cargo_for "$host" test --workspace --locked

target_root=${CARGO_TARGET_DIR:-target}

# The Debian packages (deploy/package.sh: RocksDB at -Os and the release build, for each
# target; about 15 minutes of both cores) are made from here on in the background, at
# the lowest priority, while the steps up to their tests leave much of the CPU idle (the
# client suites mostly wait on the drives and the network), in a target directory of
# their own: cargo locks a target directory for as long as it builds in it, and the
# steps in between run cargo too.
packages=$target_root/packages
crate_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
rm -rf "$packages" && mkdir -p "$packages/upgrade"
packaging_log=$(mktemp)
(
  export CARGO_TARGET_DIR=$target_root/packages-build
  nice -n 19 bash deploy/package.sh --out "$packages" >/dev/null
  # The same amd64 package at a higher version, for the in-place upgrade test (its
  # build is the one above: package.sh keeps the build of every target as it was).
  nice -n 19 bash deploy/package.sh --arch amd64 --version "$crate_version-2" \
    --out "$packages/upgrade" >/dev/null
) >"$packaging_log" 2>&1 &
packaging=$!
# A process and its descendants (from /proc: minimal images have no pgrep).
kill_tree() {
  local c
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
trap 'kill_tree "$packaging"; rm -f "$packaging_log"' EXIT

step "fuzz targets, ${FUZZ_SECONDS:-30} s each (nightly Rust and cargo-fuzz, installed when missing)"
rocksdb_status=0
rocksdb_dir=$(bash deploy/rocksdb-unity.sh "$host") || rocksdb_status=$?
case $rocksdb_status in
  0) ROCKSDB_LIB_DIR=$rocksdb_dir ROCKSDB_STATIC=1 bash deploy/fuzz.sh ;;
  2) (unset ROCKSDB_LIB_DIR ROCKSDB_STATIC && bash deploy/fuzz.sh) ;;
  *) exit "$rocksdb_status" ;;
esac

step "S3 end-to-end tests (boto3, aws CLI, curl, rclone, s3fs, the console in Chromium)"
# awscrt: botocore needs it for CRC32C and CRC64NVME checksums.
# selenium: the console's browser tests drive Debian's chromium through chromedriver.
py_ready() { python3 -c "import boto3, pytest, awscrt, selenium" 2>/dev/null && command -v aws >/dev/null; }
if ! command -v python3 >/dev/null || ! command -v curl >/dev/null; then
  sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends python3 python3-venv curl >/dev/null
fi
if ! py_ready; then
  venv=$HOME/.cache/oed/venv
  if [ ! -x "$venv/bin/pip" ]; then
    python3 -m venv "$venv" 2>/dev/null || {
      sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
      python3 -m venv "$venv"
    }
  fi
  "$venv/bin/pip" install -q boto3 awscli pytest awscrt selenium
  export PATH="$venv/bin:$PATH"
fi
# The metrics tests run Debian's Prometheus server and promtool; the tools tests rclone
# and s3fs (mounted when the machine offers FUSE, skipped with the reason otherwise).
# The package tests need lintian, file, and systemd-analyze and systemd-sysusers.
missing=()
command -v lintian >/dev/null || missing+=(lintian)
command -v file >/dev/null || missing+=(file)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v promtool >/dev/null || [ -x /usr/bin/promtool ] || missing+=(prometheus)
command -v rclone >/dev/null || missing+=(rclone)
# The console's browser tests: headless Chromium and its WebDriver, from Debian.
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# The TLS tests make certificates as docs/drive.md tells operators to, with openssl.
command -v openssl >/dev/null || missing+=(openssl)
# The drive lab's end-to-end tests (as root only) need ip and tc, and nsenter.
if [ "$(id -u)" -eq 0 ]; then
  command -v tc >/dev/null || missing+=(iproute2)
  command -v nsenter >/dev/null || missing+=(util-linux)
fi
if ((${#missing[@]})) || ! command -v s3fs >/dev/null; then
  sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # FUSE may not install in a container; the s3fs test then says it is skipped and why.
  command -v s3fs >/dev/null ||
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends s3fs >/dev/null ||
    echo "s3fs could not be installed here: its test is skipped" >&2
fi
cargo_for "$host" build --locked -p oed-daemon --bin oedd --bin oedd-tools
OED_TEST_OEDD_BIN="$(cd "$target_root" && pwd)/debug/oedd" python3 -m pytest -q -p no:cacheprovider tests/s3
step "the drive lab (network namespaces and shaped links when run as root; its pure parts always)"
OED_TEST_OEDD_BIN="$(cd "$target_root" && pwd)/debug/oedd" python3 -m pytest -q -rs -p no:cacheprovider tests/lab
step "S3 end-to-end tests (aws-sdk-s3 for Rust)"
OED_TEST_OEDD_BIN="$(cd "$target_root" && pwd)/debug/oedd" \
  cargo_for "$host" test --locked --manifest-path tests/sdk/Cargo.toml
step "Debian packages: amd64, arm64, armhf (deploy/package.sh), and their tests"
wait "$packaging" || { echo "the packages were not made:" >&2; cat "$packaging_log" >&2; exit 1; }
grep -hE "done in|Finished" "$packaging_log" || true
OED_TEST_DEBS=$packages python3 -m pytest -q -rs -p no:cacheprovider tests/package
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked" "$packaging_log"' EXIT
for pair in aarch64-unknown-linux-gnu:neon64:arm64 armv7-unknown-linux-gnueabihf:neon32:armhf; do
  IFS=: read -r t kernel arch <<<"$pair"
  step "$t: oed-ec tests under qemu (expecting the $kernel kernel)"
  OED_EXPECT_KERNEL=$kernel cargo test --locked -p oed-ec --target "$t"
  step "$t: oed-ops tests under qemu (checksums, statistics, text, sketches, compression, dedup, MD5)"
  cargo test --locked -p oed-ops --target "$t"
  step "$t: the packaged oedd ($arch) under qemu: smoke test"
  dpkg-deb -x "$packages"/oedd_*_"$arch".deb "$unpacked/$arch"
  bin=$unpacked/$arch/usr/bin/oedd
  runner_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$t")_RUNNER"
  out=$(${!runner_var} "$bin" version)
  echo "$out"
  grep -q "kernel: $kernel" <<<"$out" || { echo "oedd on $t did not pick $kernel" >&2; exit 1; }
  # --workspace, as the host tests: the same features, so the test built there is run.
  OED_TEST_OEDD_BIN="$bin" OED_TEST_OEDD_RUNNER="${!runner_var}" \
    cargo_for "$host" test --locked --workspace --test peer_api -- smoke_put_get_and_clean_stop
done
step "all tests passed"
