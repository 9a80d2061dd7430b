# Sourced by peer-bench and peer-ab: one drive of a release build, and the drive's own
# timing of each step of a shard write (oed_shard_write_seconds on its metrics endpoint,
# docs/drive.md "Durability"):
#   start_drive BIN DIR RESERVE    starts BIN/oedd on a data dir in DIR, on 127.0.0.1 at any
#                                  port, keeping RESERVE bytes free, with a metrics endpoint;
#                                  sets pid, url (peer API) and murl (metrics); exits if it
#                                  has not started within 10 s
#   write_steps METRICS_URL        one line: "phase sum count" for each phase
#   step_means BEFORE AFTER        from two such snapshots, the mean time of each step over
#                                  the writes between them: "receive 1.62 ms, data_sync ..."
# With DRIVE_NS set (a command prefix, e.g. nsenter --net=/run/netns/NAME) the drive and
# the reads of its metrics run in that network namespace, listening on DRIVE_LISTEN.
start_drive() {
  ${DRIVE_NS:-} "$1/oedd" serve --data-dir "$2/drive" --listen "${DRIVE_LISTEN:-127.0.0.1:0}" --set reserve_bytes="$3" \
    --set metrics_listen=\"127.0.0.1:0\" > "$2/oedd.out" 2> "$2/oedd.err" &
  pid=$!
  for _ in $(seq 100); do grep -q "metrics on" "$2/oedd.out" && break; sleep 0.1; done
  grep -q "metrics on" "$2/oedd.out" || { cat "$2/oedd.err" >&2; echo "$1/oedd did not start" >&2; exit 1; }
  url="http://$(sed -n 's/^oedd: listening on //p' "$2/oedd.out")"
  murl=$(sed -n 's/^oedd: metrics on //p' "$2/oedd.out")
}
write_steps() {
  { ${DRIVE_NS:-} curl -sf "$1" || true; } | awk '/^oed_shard_write_seconds_(sum|count)\{phase="/ {
      split($1, a, "\""); k = ($1 ~ /_sum/) ? "sum" : "count"; v[a[2], k] = $2; p[a[2]] = 1 }
    END { for (x in p) print x, v[x, "sum"], v[x, "count"] }'
}
step_means() {
  awk 'NR == FNR { s[$1] = $2; c[$1] = $3; next }
    { n = $3 - c[$1]; m[$1] = n > 0 ? sprintf("%.2f ms", ($2 - s[$1]) * 1000 / n) : "-" }
    END { split("receive data_sync place record", ph, " ")
      for (i = 1; i <= 4; i++) printf "%s%s %s", (i > 1 ? ", " : ""), ph[i], ((ph[i] in m) ? m[ph[i]] : "-") }' \
    <(printf '%s\n' "$1") <(printf '%s\n' "$2")
}
