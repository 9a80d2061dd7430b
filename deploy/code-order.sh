#!/usr/bin/env bash
# Writes deploy/code-order.txt.gz: the functions a drive runs, which deploy/link-ordered
# places first in packaged and benchmarked builds (docs/drive.md, "The code pages").
# Run it again when the code has changed much; a stale list costs memory, not
# correctness (functions it does not name are linked after it, in the usual order).
#
#   deploy/code-order.sh [DIR]   DIR: scratch space on a local disk (default /var/tmp/oed-code-order)
#
# How: the release `oedd` (benches/release-bins.sh) is dropped from the page cache and
# its disk's readahead turned off (restored on exit), so the processes started from it
# map only the pages of code they execute; once the drives are ready, and again once they
# have given back their pages a second time, it is dropped again (what they mapped before
# and gave back goes). `oedd dev` starts a cluster of 6 drives (4+2)
# and idles (40 s, past the drives' second give-back of pages, then 5 s more); the text pages of `oedd` present in its drives' processes (/proc/PID/pagemap) name
# the functions on them (nm): the list starts with these, in the order of their
# addresses. Then `oedd bench` writes, reads and deletes 4 MiB and 64 KiB objects
# through it and each drive's metrics are scraped once; the functions this adds follow.
# Names are written without their build's hashes (deploy/link-ordered --names).
# Needs root (readahead setting, pagemap), python3, nm and curl.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=${1:-/var/tmp/oed-code-order}
[ "$(id -u)" = 0 ] || { echo "code-order: needs root (readahead setting, pagemap)" >&2; exit 2; }
unset BIN_DIR
source benches/release-bins.sh
release_bins
rm -rf "$dir"; mkdir -p "$dir"
cp "$bin/oedd" "$bin/oedd-tools" "$dir/"
exe=$dir/oedd
dev=$(df --output=source "$dir" | tail -1); ra=/sys/block/$(basename "$dev")/queue/read_ahead_kb
[ -w "$ra" ] || { echo "code-order: no readahead setting for $dev ($ra)" >&2; exit 2; }
old_ra=$(cat "$ra")
cluster=
cleanup() {
  echo "$old_ra" >"$ra"
  [ -z "$cluster" ] || { kill -TERM "$cluster" 2>/dev/null; wait "$cluster" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
uncache "$exe"
echo 0 >"$ra"

"$exe" dev --drives 6 --k 4 --m 2 --dir "$dir/cluster" >"$dir/dev.log" 2>&1 &
cluster=$!
for _ in $(seq 150); do grep -q "secret key" "$dir/dev.log" 2>/dev/null && break; sleep 0.2; done
grep -q "secret key" "$dir/dev.log" || { cat "$dir/dev.log" >&2; echo "code-order: the cluster did not start" >&2; exit 1; }
endpoint=$(sed -n 's/^oedd dev: endpoint //p' "$dir/dev.log")
export AWS_ACCESS_KEY_ID=oed AWS_SECRET_ACCESS_KEY=$(sed -n 's/^oedd dev: secret key //p' "$dir/dev.log")
pids="$cluster $(pgrep -P "$cluster" -x oedd | tr '\n' ' ')"
# Ready drives have given back the pages only starting used (docs/drive.md, "The pages
# of starting"); dropping those from the page cache too leaves cached only the pages
# mapped now, so a page touched from here on is read alone (readahead off) and
# fault-around finds no untouched neighbour to map with it: what the list is made from
# is the code run, not the code beside it.
sleep 1
uncache "$exe"
# Drives give their pages back again 30 s after they are ready (loader_pages::SETTLE),
# after their first rounds of serving: the idle list is what they run after that.
sleep 35
uncache "$exe"

# used_code: the functions on the text pages present in the cluster's processes, in the
# order of their addresses, named without their build's hashes.
used_code() {
  # shellcheck disable=SC2086 # one argument per process
  python3 - "$exe" $pids <<'EOF' | deploy/link-ordered --names
import struct, subprocess, sys
exe, pids = sys.argv[1], sys.argv[2:]
present = set()
for pid in pids:
    maps = [l.split() for l in open(f"/proc/{pid}/maps")]
    maps = [m for m in maps if len(m) >= 6 and m[5] == exe]
    if not maps:  # `oedd dev` itself runs as oedd-tools: not a drive's code
        continue
    base = min(int(m[0].split("-")[0], 16) - int(m[2], 16) for m in maps)
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        for m in maps:
            if "x" not in m[1]:
                continue
            a, b = (int(x, 16) for x in m[0].split("-"))
            pm.seek(a // 4096 * 8)
            words = pm.read((b - a) // 4096 * 8)
            for i in range((b - a) // 4096):
                if struct.unpack_from("<Q", words, i * 8)[0] >> 63:
                    present.add((a - base) // 4096 + i)
names, size = [], 0
for line in subprocess.run(["nm", "-n", "-S", "--defined-only", exe], capture_output=True,
                           text=True, check=True).stdout.splitlines():
    f = line.split()
    if len(f) == 4 and f[2] in "tTwW":
        addr, n = int(f[0], 16), max(int(f[1], 16), 1)
        if any(p in present for p in range(addr // 4096, (addr + n - 1) // 4096 + 1)):
            names.append(f[3])
            size += n
print("\n".join(names))
print(f"code-order: {len(present) * 4 / 1024:.1f} MiB of code pages used by {len(pids)} "
      f"processes; {len(names)} functions ({size / 1048576:.1f} MiB) on them", file=sys.stderr)
EOF
}

sleep 5
used_code >"$dir/idle.txt"
for load in "4MiB 64 8" "64KiB 256 16"; do
  read -r size count clients <<<"$load"
  "$exe" bench --endpoint "$endpoint" --bucket order --size "$size" --count "$count" \
    --clients "$clients" --quiet >/dev/null
done
for url in $(sed -n 's/^oedd dev: metrics //p' "$dir/dev.log" | tr ' ' '\n' | grep '^http'); do
  curl -sf "$url" >/dev/null || true
done
used_code >"$dir/busy.txt"
awk '!seen[$0]++' "$dir/idle.txt" "$dir/busy.txt" | gzip -9n >deploy/code-order.txt.gz
echo "code-order: wrote deploy/code-order.txt.gz ($(gzip -dc deploy/code-order.txt.gz | wc -l) names, $(wc -l <"$dir/idle.txt") of them idle)" >&2
