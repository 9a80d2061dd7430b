# shellcheck shell=bash
# Sourced by s3-ab, peer-ab and read-ab, first thing after `set -euo pipefail`: the
# harness that compares two builds (directories holding oedd, and oedd-tools for builds
# that hand their tools to it), or two settings of one
# build, in rounds whose order alternates (A B, B A, A B, ...), so that a drift of the
# machine over a run favours neither side. It moves to the top of the repository. The
# script that sources it says which benchmark a run is and which figures it reads:
#   ab_args TOOLS WORD=DEFAULT [NAME=VALUE...] -- "$@"
#       reads the command line DIR_A DIR_B [WORD]: with fewer than two arguments prints
#       the script's opening comment as its usage and exits 2; exits 2 too when a DIR
#       lacks an executable of TOOLS (a list of words) or when WORD (DEFAULT if not
#       given) or a VALUE is not a positive number. Sets ab_dir[A], ab_dir[B], ab_env[A]
#       and ab_env[B] (ENV_A and ENV_B: NAME=VALUE words for that build's runs only) and
#       ab_rounds, and from then on calls ab_cleanup, if the script defines it, on exit.
#   ab_title TEXT           "## A = DIR_A ENV_A, B = DIR_B ENV_B, TEXT"
#   ab_alternate FUNCTION   calls FUNCTION NAME ROUND (NAME A or B) ab_rounds times for
#                           each build, in alternating order. FUNCTION runs one round
#                           of one build, records its figures with ab_record and prints
#                           them; it exits non-zero if the run fails.
#   ab_record LINE          keeps the figures of one run: "NAME ROUND FIGURE..."
#   ab_table WIDTH VALUE_WIDTH RANGE_FORMAT NAME...
#       per figure (named in the order of the records; a figure no run of A has is left
#       out), each build's mean and range (printf RANGE_FORMAT) and the mean over rounds
#       of B against A, in columns WIDTH and VALUE_WIDTH wide
#   ab_medians              per build, "NAME" and the median of every figure

declare -A ab_dir=() ab_env=()
ab_rounds='' ab_word='' ab_results=''
ab_me=$(basename "$0")
ab_script=$(cd "$(dirname "$0")" && pwd)/$ab_me
cd "$(dirname "$ab_script")/.." || exit 2

ab_args() {
  local tools=$1 count=$2 checks=() d f
  shift 2
  while [ "$1" != -- ]; do checks+=("$1"); shift; done
  shift
  if [ $# -lt 2 ]; then
    awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$ab_script"
    exit 2
  fi
  ab_word=${count%%=*}
  ab_rounds=${3:-${count#*=}}
  ab_dir=([A]=$1 [B]=$2)
  ab_env=([A]=${ENV_A:-} [B]=${ENV_B:-})
  for d in "$1" "$2"; do
    for f in $tools; do
      [ -x "$d/$f" ] || { echo "$ab_me: $d/$f is missing or not executable" >&2; exit 2; }
    done
    # Builds that run `oedd dev` and `oedd bench` as oedd-tools need it beside oedd.
    if [ -x "$d/oedd" ] && grep -qa 'oedd-tools' "$d/oedd" && [ ! -x "$d/oedd-tools" ]; then
      echo "$ab_me: $d/oedd-tools is missing: this build's oedd runs dev and bench through it" >&2
      exit 2
    fi
  done
  ab_positive "$ab_word=$ab_rounds" "${checks[@]}"
  ab_results=$(mktemp)
  trap ab_exit EXIT
}

# ab_positive NAME=VALUE...: exits 2, naming them all, unless every VALUE is a positive
# number.
ab_positive() {
  local kv names=() bad='' list
  for kv; do
    names+=("${kv%%=*}")
    case ${kv#*=} in '' | *[!0-9]* | 0) bad=1 ;; esac
  done
  [ -n "$bad" ] || return 0
  if [ ${#names[@]} = 1 ]; then
    echo "$ab_me: ${names[0]} must be a positive number" >&2
  else
    list=$(printf ', %s' "${names[@]:0:${#names[@]}-1}")
    echo "$ab_me: ${list#, } and ${names[-1]} must be positive numbers" >&2
  fi
  exit 2
}

# On exit: the script's own cleanup (every step of it, one that fails too: `||` turns
# off errexit within it), then the figures.
ab_exit() {
  if declare -F ab_cleanup >/dev/null; then ab_cleanup || true; fi
  rm -f "$ab_results"
}

ab_title() {
  echo "## A = ${ab_dir[A]} ${ab_env[A]}, B = ${ab_dir[B]} ${ab_env[B]}, $*"
}

ab_alternate() {
  local r
  for r in $(seq "$ab_rounds"); do
    if [ $((r % 2)) = 1 ]; then "$1" A "$r"; "$1" B "$r"; else "$1" B "$r"; "$1" A "$r"; fi
  done
}

ab_record() {
  echo "$1" >>"$ab_results"
}

ab_table() {
  local width=$1 value_width=$2 range=$3
  shift 3
  awk -v w="$width" -v vw="$value_width" -v rf="$range" -v word="${ab_word,,}" -v names="$(IFS=,; echo "$*")" '
    { k = $1; n[k]++; if (NF > nf[k]) nf[k] = NF
      for (i = 3; i <= NF; i++) { v = $i; s[k, i] += v
        if (n[k] == 1 || v < lo[k, i]) lo[k, i] = v
        if (n[k] == 1 || v > hi[k, i]) hi[k, i] = v
        val[k, $2, i] = v }
      rs[$2] = 1 }
    END {
      c = split(names, name, ",")
      row = "%-" w "s %-" vw "s %-" vw "s "; mean = "%.2f (" rf "-" rf ")"
      printf row "%s\n", "figure", "A: mean (range)", "B: mean (range)", "B / A, mean of " word
      for (i = 3; i < 3 + c && i <= nf["A"]; i++) {
        q = 0; m = 0
        for (r in rs) if (val["A", r, i] > 0 && val["B", r, i] != "") { q += val["B", r, i] / val["A", r, i]; m++ }
        printf row "%.3f\n", name[i - 2],
          sprintf(mean, s["A", i] / n["A"], lo["A", i], hi["A", i]),
          sprintf(mean, s["B", i] / n["B"], lo["B", i], hi["B", i]), (m ? q / m : 0)
      }
    }' "$ab_results"
}

ab_medians() {
  local k
  for k in A B; do
    awk -v k=$k '$1 == k' "$ab_results" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split()[2:])) for l in sys.stdin]
print(sys.argv[1], *(round(statistics.median(c), 2) for c in zip(*rows)))' "$k"
  done
}
