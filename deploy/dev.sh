#!/usr/bin/env bash
# Starts a local OED cluster: builds oedd (installing libclang for RocksDB's bindings
# when it is missing) and runs `oedd dev`, which starts one oedd per drive on 127.0.0.1
# and prints the S3 endpoint and credentials. Ctrl-C stops it.
#
#   deploy/dev.sh                     6 drives, EC 4+2, data in a temporary directory
#   deploy/dev.sh --drives 8 --k 5 --m 3 --dir /var/tmp/oed
#   OED_PROFILE=release deploy/dev.sh  an optimised build (RocksDB's C++ takes ~20 min)
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
cargo build --locked -p oed-daemon --bin oedd --profile "$profile"
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
exec "$CARGO_TARGET_DIR/$dir/oedd" dev "$@"
