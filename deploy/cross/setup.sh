#!/usr/bin/env bash
# Cross-compilation for the drives' CPUs: aarch64 and armv7 (hard float), tested here by
# running the binaries under qemu-user.
#
#   deploy/cross/setup.sh            install what is missing (Debian packages, rust targets)
#   source deploy/cross/setup.sh env export the per-target cargo/cc variables only
#
# What it sets, per target triple T (upper-cased with underscores for cargo):
#   CC_T, AR_T                         the Debian cross gcc and ar (used by cc-rs; the C++
#                                      compiler, clang++, is set in .cargo/config.toml)
#   CARGO_TARGET_T_LINKER              the cross gcc
#   CARGO_TARGET_T_RUNNER              qemu-user with the cross sysroot, so `cargo test
#                                      --target T` and `cargo run --target T` just work
#                                      (binfmt_misc is not needed)
#   CXXFLAGS_armv7_unknown_linux_gnueabihf
#                                      forces in deploy/cross/armv7-no-uint128.h (copied to
#                                      ~/.cache/oed/ so the flag does not depend on where
#                                      the clone is): RocksDB assumes __uint128_t, which
#                                      32-bit ARM compilers lack
# The Debian :arm64/:armhf multiarch libc packages must NOT be installed: a second libc
# makes threaded programs hang under qemu. The sysroots of the cross gcc packages suffice.

set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TARGETS=(aarch64-unknown-linux-gnu armv7-unknown-linux-gnueabihf)

cross_env() {
  export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
  export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib"

  export CC_armv7_unknown_linux_gnueabihf=arm-linux-gnueabihf-gcc
  export AR_armv7_unknown_linux_gnueabihf=arm-linux-gnueabihf-ar
  # The flag names the header by a path outside the checkout: cargo rebuilds RocksDB's
  # C++ (12+ minutes) whenever the flag's text changes, and a clone elsewhere would
  # change it.
  local stable=${XDG_CACHE_HOME:-$HOME/.cache}/oed/armv7-no-uint128.h
  mkdir -p "$(dirname "$stable")"
  cmp -s "$here/armv7-no-uint128.h" "$stable" 2>/dev/null || cp "$here/armv7-no-uint128.h" "$stable"
  export CXXFLAGS_armv7_unknown_linux_gnueabihf="-include $stable"
  export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER=arm-linux-gnueabihf-gcc
  export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_RUNNER="qemu-arm-static -L /usr/arm-linux-gnueabihf -E LD_LIBRARY_PATH=/usr/arm-linux-gnueabihf/lib"
}

install_missing() {
  # faketime: the host tests run a drive whose clock is off (tests/peer_clock.rs).
  local pkgs=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu gcc-arm-linux-gnueabihf
              g++-arm-linux-gnueabihf qemu-user-static libclang-dev clang faketime)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  local installed
  installed=$(rustup target list --installed)
  for t in "${TARGETS[@]}"; do
    grep -qx "$t" <<<"$installed" || { echo "setup: rustup target add $t" >&2; rustup target add "$t"; }
  done
}

if [ "${1:-}" = env ]; then
  cross_env
else
  install_missing
  cross_env
fi
