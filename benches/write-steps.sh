# Sourced by peer-bench and peer-ab. The drive's own timing of each step of a shard write
# (oed_shard_write_seconds on its metrics endpoint, docs/drive.md "Durability"):
#   write_steps METRICS_URL        one line: "phase sum count" for each phase
#   step_means BEFORE AFTER        from two such snapshots, the mean time of each step over
#                                  the writes between them: "receive 1.62 ms, data_sync ..."
write_steps() {
  { curl -sf "$1" || true; } | awk '/^oed_shard_write_seconds_(sum|count)\{phase="/ {
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
