#!/usr/bin/env bash
# Starts a local OED cluster: builds oedd (installing libclang for RocksDB's bindings
# when it is missing) and runs `oedd dev`, which starts one oedd per drive on 127.0.0.1
# and prints the S3 endpoint and credentials. Ctrl-C stops it.
#
#   deploy/dev.sh                     6 drives, EC 4+2, data in a temporary directory
#   deploy/dev.sh --drives 8 --k 5 --m 3 --dir /var/tmp/oed
#   OED_PROFILE=release deploy/dev.sh  an optimised build
#
# RocksDB's C++ is compiled as two unity units (deploy/rocksdb-unity.sh: about 30 s at
# -O0, 80 s at -Os for release, on two cores) instead of file by file (16-20 minutes), so
# a first start on a fresh machine takes a few minutes.
#
# Every other argument goes to `oedd dev` (see `oedd dev --help`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need=()
for p in libclang-dev clang; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  echo "dev: installing ${need[*]}" >&2
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/oed/target}
profile=${OED_PROFILE:-dev}
echo "dev: building oedd ($profile profile; the first build compiles RocksDB and takes a while)" >&2
host=$(rustc -vV | sed -n 's/^host: //p')
status=0
lib=$(bash deploy/rocksdb-unity.sh "$host" "$([ "$profile" = dev ] && echo debug || echo release)") || status=$?
case $status in
  0) ROCKSDB_LIB_DIR=$lib ROCKSDB_STATIC=1 cargo build --locked -p oed-daemon --bin oedd --bin oedd-tools --profile "$profile" ;;
  2) cargo build --locked -p oed-daemon --bin oedd --bin oedd-tools --profile "$profile" ;;  # cargo compiles RocksDB itself
  *) exit "$status" ;;
esac
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
exec "$CARGO_TARGET_DIR/$dir/oedd" dev "$@"
