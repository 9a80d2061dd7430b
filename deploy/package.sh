#!/usr/bin/env bash
# Debian packages of oedd, made with cargo-deb (installed when missing):
#
#   deploy/package.sh                          amd64, arm64 and armhf into target/packages/
#   deploy/package.sh --arch armhf --arch arm64
#   deploy/package.sh --version 0.1.1-1 --out /tmp/debs
#
# Each package, oedd_<version>_<arch>.deb, holds the release binary (stripped), the
# commented conffile /etc/oed/oedd.toml, the hardened oedd.service (enabled and started
# on install where systemd runs, restarted after an upgrade), the oed system user
# (sysusers.d) and /var/lib/oed (tmpfiles.d), the man page, the Prometheus
# configuration and rules and the Grafana dashboard under /usr/share/oed/, and the
# deployment docs; docs/deploy.md says what goes where. RocksDB's C++ is compiled as two
# unity units at -Os (deploy/rocksdb-unity.sh release), about 4 minutes per target on
# two cores instead of about 20 file by file. The binary's glibc, libgcc and libstdc++
# symbol versions are checked against the package's Depends.
#
# It prints the path of each package made, one per line, on stdout.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

arches=()
version=
out=
while (($#)); do
  case $1 in
    --arch) arches+=("$2"); shift 2 ;;
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "package: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
done
((${#arches[@]})) || arches=(amd64 arm64 armhf)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
# Not target/debian: cargo-deb clears older packages out of that directory.
out=${out:-$CARGO_TARGET_DIR/packages}
mkdir -p "$out"
crate_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
version=${version:-$crate_version-1}

# Tools: the cross compilers, qemu-user and libclang (deploy/cross/setup.sh), cargo-deb.
bash deploy/cross/setup.sh >/dev/null
# shellcheck source=cross/setup.sh
source deploy/cross/setup.sh env
if ! command -v cargo-deb >/dev/null; then
  echo "package: installing cargo-deb" >&2
  cargo install --locked --quiet cargo-deb --version '^3.8'
fi

triple_of() {
  case $1 in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    armhf) echo armv7-unknown-linux-gnueabihf ;;
    *) echo "package: no target for architecture $1 (amd64, arm64, armhf)" >&2; return 1 ;;
  esac
}

# The newest version of each versioned library its dynamic symbols need must be within
# what Depends in crates/oed-daemon/Cargo.toml promises.
check_depends() {
  local bin=$1 depends need have
  depends=$(sed -n 's/^depends = "\(.*\)"/\1/p' crates/oed-daemon/Cargo.toml)
  for pair in GLIBC_:libc6 GLIBCXX_:libstdc++6; do
    # A binary may need none of a library's versions (oedd-tools links no libstdc++).
    need=$(objdump -T "$bin" | { grep -o "${pair%%:*}[0-9.]*" || true; } | sed "s/^${pair%%:*}//" | sort -V | tail -1)
    [ -n "$need" ] || continue
    have=$(grep -o "${pair##*:} (>= [0-9.]*)" <<<"$depends" | grep -o '[0-9.]*)' | tr -d ')')
    if [ "$pair" = GLIBCXX_:libstdc++6 ]; then
      # GLIBCXX_3.4.N came with GCC: 3.4.29 is GCC 11, 3.4.30 GCC 12, 3.4.32 GCC 13.
      case $need in
        3.4.2[0-9]) need_gcc=11 ;;
        3.4.30|3.4.31) need_gcc=12 ;;
        *) need_gcc=99 ;;
      esac
      if [ "$need_gcc" -gt "${have%%.*}" ]; then
        echo "package: $bin needs GLIBCXX_$need (libstdc++6 >= $need_gcc); Depends says >= $have" >&2
        return 1
      fi
    elif [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -1)" != "$have" ]; then
      echo "package: $bin needs ${pair%%:*}$need; Depends says ${pair##*:} >= $have" >&2
      return 1
    fi
  done
}

mkdir -p deploy/debian/generated
date_rfc=$(date -R -u -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")
cat > deploy/debian/generated/changelog <<CHANGES
oedd ($version) stable; urgency=medium

  * Built from the OED tree at $(git rev-parse --short HEAD 2>/dev/null || echo unknown).

 -- OED developers <oed@example.invalid>  $date_rfc
CHANGES

# One cargo run builds every target asked for, so that one target's build overlaps
# another's longest crates (most of a release build is one crate at a time), and each
# target's build stays as it was for the next run: build scripts and proc macros, which
# all targets share, always link with the amd64 target's linker (cargo gives them the
# host triple's), which would otherwise differ between runs for one target and another
# and make cargo rebuild them and everything above them.
# Each target links with its own C compiler driver (the cross gcc), through
# deploy/link-ordered (the code a drive runs placed first) and rustc's lld, and with the
# RocksDB deploy/rocksdb-unity.sh built for it: librocksdb-sys takes one library
# directory for all targets (ROCKSDB_LIB_DIR, here an empty one), so each target's is
# given to rustc in that target's flags.
host_triple=$(rustc -vV | sed -n 's/^host: //p')
build_env=(CODE_ORDER_FILE="$root/deploy/code-order.txt.gz" ROCKSDB_STATIC=1)
# Target T's linker: deploy/link-ordered around its C compiler driver.
set_linker() {
  local linker_var link_cc
  linker_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$1")_LINKER"
  link_cc=${!linker_var:-cc}
  [[ $link_cc != */link-ordered* ]] || link_cc=cc
  build_env+=("$linker_var=$(bash deploy/link-ordered --install "$link_cc")")
}
build_for=()
for arch in "${arches[@]}"; do
  t=$(triple_of "$arch")
  set_linker "$t"
  lib=$(bash deploy/rocksdb-unity.sh "$t" release)
  # Cargo reads a target's flags only when RUSTFLAGS is not set: those go with them.
  build_env+=("CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$t")_RUSTFLAGS=${RUSTFLAGS:+$RUSTFLAGS }-L native=$lib")
  build_for+=(--target "$t")
  # Cargo does not know the order file: a newer one must relink a daemon built before.
  bin=$CARGO_TARGET_DIR/$t/deb/oedd
  [ ! -e "$bin" ] || [ ! deploy/code-order.txt.gz -nt "$bin" ] || touch crates/oed-daemon/src/main.rs
done
# The host's linker even when only ARM packages are asked for (see above).
[[ " ${build_for[*]} " == *" $host_triple "* ]] || set_linker "$host_triple"
no_lib=$CARGO_TARGET_DIR/rocksdb-unity/none
mkdir -p "$no_lib"
echo "package: building oedd for ${arches[*]}" >&2
env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS "${build_env[@]}" ROCKSDB_LIB_DIR="$no_lib" \
  cargo build --locked -p oed-daemon --bin oedd --bin oedd-tools --profile deb "${build_for[@]}"

for arch in "${arches[@]}"; do
  t=$(triple_of "$arch")
  bin=$CARGO_TARGET_DIR/$t/deb/oedd
  check_depends "$bin"
  check_depends "$CARGO_TARGET_DIR/$t/deb/oedd-tools"
  runner_var="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$t")_RUNNER"
  # shellcheck disable=SC2086 # the runner is a command with its flags
  ${!runner_var:-} "$bin" man | gzip -9n > deploy/debian/generated/oedd.1.gz
  deb=$out/oedd_${version}_$arch.deb
  cargo deb --locked --no-build --no-strip --profile deb --target "$t" -p oed-daemon \
    --deb-version "$version" --output "$deb" >&2
  echo "package: $deb ($(( $(stat -c %s "$deb") / 1024 )) KiB)" >&2
  echo "$deb"
done
