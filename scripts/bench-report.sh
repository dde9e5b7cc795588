#!/usr/bin/env bash
# Runs the benches and rewrites the table of current figures in docs/benchmarks.md (between
# its bench-table markers) with what they print, today's date, the commit and the machine.
#
#   scripts/bench-report.sh                     every bench in benches/
#   scripts/bench-report.sh --only pgwire       only these (repeat --only, or list: a,b)
#
# Rows of benches not run stay as they are. A figure missing from a bench's output, or a bench
# that fails, leaves its old row and is reported on stderr; the script then exits 1, after
# writing the rows it did measure.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

DOC=docs/benchmarks.md
START='<!-- bench-table:start -->'
END='<!-- bench-table:end -->'
HEADER='| bench | figure | reference | ratio / value | goal | date | build | machine |'
SEPARATOR='|---|---|---|---|---|---|---|---|'

usage() {
  sed -n '2,10s/^# \{0,1\}//p' "$0"
}

# The arguments each bench runs with: the commands docs/benchmarks.md names for its figures.
# `stream` runs twice: the apply figures come from a run without freshness, and freshness from
# a short one, as in the docs.
bench_runs() {
  case $1 in
    capture) echo "capture|--rows 1000000" ;;
    decode) echo "decode|--rows 300000" ;;
    snapshot) echo "snapshot|--rounds 5" ;;
    stream)
      echo "stream|--changes 1000000 --rows 10000 --rounds 5 --seconds 0"
      echo "stream-freshness|--changes 100000 --rows 10000 --rounds 3 --seconds 3 --rate 10000"
      ;;
    pgwire) echo "pgwire|--rows 100000 --pgbench-seconds 5" ;;
    sinks) echo "sinks|--rounds 5" ;;
    *) echo "$1|" ;;
  esac
}

# The rows of the table, in order: id|bench|figure|reference|goal. The bench and figure cells
# identify a row in the document, so they must stay as the document writes them.
# shellcheck disable=SC2016 # the backticks are Markdown, not commands
ROWS=(
  'capture_binlog|`capture`|binlog rows decoded into Arrow, rows/s|raw read of the same binlog stream, CRC32 verified|≥ 0.8'
  'capture_select|`capture`|`SELECT` into Arrow, rows/s|`mariadb --quick` client, output to /dev/null|—'
  'decode|`decode`|rows events decoded in memory (ratio: decode time ÷ copy time)|plain copy of the same bytes|—'
  'snapshot_rate|`snapshot`|snapshot rate, rows/s (watermarks, the default)|raw `SELECT *` of the table through mysql_async|≥ 0.6 (stretch 0.8)'
  'snapshot_peak|`snapshot`|peak resident memory during the snapshot|Arrow size of the rows|≤ 1.5'
  'snapshot_table|`snapshot`|memory of the published current table|Arrow size of the rows|≤ 1.3'
  'stream_apply|`stream`|streaming apply of 1,000,000 single-row updates, changes/s|raw read of the same binlog range, CRC32 verified|≥ 0.5'
  'stream_indexed|`stream`|the same apply with a secondary index on the column every update changes, changes/s|the same engine without the index|—'
  'stream_fresh|`stream`|freshness at 10,000 commits/s: commit returned → visible, p99|—|< 50 ms'
  'pg_select1|`pgwire`|`SELECT 1`, simple protocol, p50 (ratio: ours ÷ PostgreSQL)|PostgreSQL with the same rows and client|≤ 1.5'
  'pg_literal|`pgwire`|primary-key lookup, literal varying, simple protocol, p50 (ratio: ours ÷ PostgreSQL)|PostgreSQL with the same rows and client|≤ 1.5'
  'pg_prepared|`pgwire`|primary-key lookup, prepared, p50 (ratio: ours ÷ PostgreSQL)|PostgreSQL with the same rows and client|≤ 1.5'
  'pg_index|`pgwire`|lookup by a secondary-index column, prepared, p50 (ratio: ours ÷ PostgreSQL)|PostgreSQL with the same rows, client and index|≤ 2'
  'pg_range|`pgwire`|primary-key range of 1,000 rows, prepared, p50 (ratio: ours ÷ PostgreSQL)|PostgreSQL with the same rows and client|≤ 2'
  'pg_scan|`pgwire`|large result in binary format, rows/s|PostgreSQL with the same rows and client|≥ 0.9'
  'pg_pgbench|`pgwire`|`pgbench -M prepared -c 4` point lookups, transactions/s|PostgreSQL with the same rows|≥ 0.67'
  'durable_restart|`durable`|restart to caught up with a 1M-row state (ratio: snapshot time ÷ restart time)|initial snapshot of the same table|—'
  'durable_checkpoint|`durable`|checkpoint of the 1M-row state on a clean stop|—|—'
  'durable_ingest|`durable`|ingest with a checkpoint every 200 ms, changes/s|in-memory engine reading the same binlog|—'
  'reconcile_bytes|`reconcile`|bytes `reconcile` moves for a 1M-row table|Arrow size of the table|—'
  'reconcile_time|`reconcile`|time of `reconcile` (ratio: join time ÷ reconcile time)|`FULL OUTER JOIN` of `mysql_snapshot` with the table|—'
  'sink_parquet|`sinks`|Parquet changelog sink, rows/s (in brackets: CPU, direct ÷ sink)|one `ArrowWriter` writing the same batches|—'
  'sink_postgres|`sinks`|PostgreSQL changelog sink, rows/s (in brackets: CPU, direct ÷ sink)|one `COPY` of the same batches|—'
  'sink_delta|`sinks`|Delta changelog sink, rows/s (in brackets: CPU, direct ÷ sink)|`deltalake` append of the same batches|—'
  'fresh_parquet|`sinks`|Parquet sink freshness at 10,000 changes/s, p50 / p99|— (`commit_interval = '"'1s'"'`)|—'
  'fresh_postgres|`sinks`|PostgreSQL sink freshness at 10,000 changes/s, p50 / p99|— (`commit_interval = '"'1s'"'`)|—'
  'fresh_delta|`sinks`|Delta sink freshness at 10,000 changes/s, p50 / p99|— (`commit_interval = '"'1s'"'`)|—'
  'views_lookup|`views`|point lookup, p50 (ratio: MemTable time ÷ ours)|DataFusion `MemTable` holding the same rows|—'
  'views_scan|`views`|full scan, rows/s|DataFusion `MemTable` holding the same rows|—'
  'views_memory|`views`|memory of the current table|Arrow size of the rows|—'
)

# --- arguments --------------------------------------------------------------------------

mapfile -t ALL < <(for f in benches/*.rs; do basename "$f" .rs; done)
only=()
while [ $# -gt 0 ]; do
  case $1 in
    --only)
      [ $# -ge 2 ] || { echo "--only needs a bench name" >&2; exit 2; }
      IFS=, read -ra names <<<"$2"; only+=("${names[@]}"); shift 2 ;;
    --only=*)
      IFS=, read -ra names <<<"${1#--only=}"; only+=("${names[@]}"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ ${#only[@]} -eq 0 ]; then
  only=("${ALL[@]}")
fi
for name in "${only[@]}"; do
  if ! printf '%s\n' "${ALL[@]}" | grep -qxF -- "$name"; then
    echo "no bench named '$name' (benches: ${ALL[*]})" >&2
    exit 2
  fi
done
if ! grep -qxF -- "$START" "$DOC" || ! grep -qxF -- "$END" "$DOC"; then
  echo "$DOC has no $START ... $END table" >&2
  exit 2
fi

ensure_tools

# --- what is measured where ---------------------------------------------------------------

TODAY=$(date -u +%Y-%m-%d)
BUILD=$(git rev-parse --short HEAD)
# Measured before any bench runs: the state of the tree that was built.
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  BUILD="$BUILD-dirty"
fi
memory_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
cpu_model=$(awk -F: '/^model name/ {sub(/^[ \t]+/, "", $2); print $2; exit}' /proc/cpuinfo)
MACHINE="$(nproc) cores, $(awk -v k="$memory_kib" 'BEGIN {printf "%.1f", k / 1048576}') GiB, ${cpu_model:-CPU model unknown}"
MACHINE=${MACHINE//|/\/}

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

failed=0
declare -A VALUE=()   # row id -> the new ratio / value cell
declare -A RAN=()     # bench -> 1 when every run of it finished

# --- running ------------------------------------------------------------------------------

for name in "${only[@]}"; do
  ok=1
  while IFS='|' read -r label args; do
    echo "== cargo bench --bench $name -- $args" >&2
    # shellcheck disable=SC2086 # the arguments are words on purpose
    if ! cargo bench --bench "$name" -- $args </dev/null | tee "$OUT/$label.out"; then
      echo "bench-report: cargo bench --bench $name failed; its rows are left as they were" >&2
      ok=0
      failed=1
      break
    fi
  done < <(bench_runs "$name")
  [ "$ok" = 1 ] && RAN[$name]=1
done

# --- reading the figures --------------------------------------------------------------------

# The groups of the last line of file $1 that matches the extended regex $2, tab-separated;
# nothing (and status 1) when no line matches.
grab() {
  local file=$1 regex=$2 line found='' i
  [ -f "$file" ] || return 1
  while IFS= read -r line; do
    if [[ $line =~ $regex ]]; then
      found=${BASH_REMATCH[1]}
      for ((i = 2; i < ${#BASH_REMATCH[@]}; i++)); do found+=$'\t'${BASH_REMATCH[i]}; done
    fi
  done <"$file"
  [ -n "$found" ] || return 1
  printf '%s\n' "$found"
}

# A count as people read it: 1.23 M above a million, digits grouped by thousands below.
human() {
  awk -v n="$1" 'BEGIN {
    if (n >= 1000000) { printf "%.2f M", n / 1000000; exit }
    s = sprintf("%.0f", n); out = ""
    while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
    printf "%s%s", s, out }'
}

# Records the value of row $1, or says on stderr that its figure is missing.
set_value() {
  local id=$1 value=$2
  if [ -z "$value" ]; then
    echo "bench-report: no figure for row '$id' in the bench's output; the old row stays" >&2
    failed=1
    return
  fi
  VALUE[$id]=$value
}

# Each reader fills the rows of one bench from its output; a figure it cannot find leaves
# that row's value empty, so set_value reports it.

read_capture() {
  local f=$OUT/capture.out v='' ratio ours ref
  if ratio=$(grab "$f" '^ +ratio cdcfusion / raw, both CRC32: +([0-9.]+)') &&
    ours=$(grab "$f" '^ +cdcfusion decoder into Arrow: +([0-9]+) rows/s') &&
    ref=$(grab "$f" '^ +raw stream read, CRC32 verified: +([0-9]+) rows/s'); then
    v="$ratio ($(human "$ours") against $(human "$ref") rows/s)"
  fi
  set_value capture_binlog "$v"
  v=''
  if ratio=$(grab "$f" '^ +ratio cdcfusion / mariadb client: +([0-9.]+)') &&
    ours=$(grab "$f" '^ +cdcfusion SELECT into Arrow: +([0-9]+) rows/s') &&
    ref=$(grab "$f" '^ +mariadb --quick > /dev/null: +([0-9]+) rows/s'); then
    v="$ratio ($(human "$ours") against $(human "$ref") rows/s)"
  fi
  set_value capture_select "$v"
}

read_decode() {
  local f=$OUT/decode.out v='' ratio ns
  if ratio=$(grab "$f" '^ +median ratio decode / copy over [0-9]+ rounds: ([0-9.]+)') &&
    ns=$(grab "$f" '^ +decode into Arrow: +([0-9.]+) ns/row +([0-9.]+) ns/value'); then
    v="$ratio (${ns%%$'\t'*} ns a row, ${ns#*$'\t'} ns a value)"
  fi
  set_value decode "$v"
}

read_snapshot() {
  local f=$OUT/snapshot.out v
  v=$(grab "$f" '^ +snapshot rate / raw SELECT \*: +([0-9.]+)') || v=''
  set_value snapshot_rate "$v"
  v=$(grab "$f" '^ +peak RSS / Arrow size of the rows: +([0-9.]+)') || v=''
  set_value snapshot_peak "$v"
  v=$(grab "$f" '^ +current-table memory / Arrow size: +([0-9.]+)') || v=''
  set_value snapshot_table "$v"
}

read_stream() {
  local f=$OUT/stream.out v='' ratio ours ref fresh rate found
  if ratio=$(grab "$f" '^ +ratio cdcfusion / raw: +([0-9.]+)') &&
    ours=$(grab "$f" '^ +cdcfusion, published: +([0-9]+) changes/s') &&
    ref=$(grab "$f" '^ +raw read, CRC32 verified: +([0-9]+) changes/s'); then
    v="$ratio ($(human "$ours") against $(human "$ref") changes/s)"
  fi
  set_value stream_apply "$v"
  v=''
  if found=$(grab "$f" '^ +with an index on `a`: +([0-9]+) changes/s, ([0-9.]+) of without'); then
    IFS=$'\t' read -r ours ratio <<<"$found"
    v="$ratio ($(human "$ours") changes/s)"
  fi
  set_value stream_indexed "$v"
  v=''
  f=$OUT/stream-freshness.out
  if fresh=$(grab "$f" 'visible in a published version: p50 ([0-9.]+) ms, p99 ([0-9.]+) ms, max ([0-9.]+) ms') &&
    rate=$(grab "$f" '^ +write rate reached: ([0-9]+) commits/s'); then
    IFS=$'\t' read -r p50 p99 max <<<"$fresh"
    v="$p99 ms (p50 $p50 ms, max $max ms; $(human "$rate") commits/s reached)"
  fi
  set_value stream_fresh "$v"
}

# One pgwire latency line: `  <name>   p50: cdcfusion N µs, PostgreSQL M µs, ratio R`.
pg_latency() {
  local f=$1 name=$2 found ours theirs ratio
  found=$(grab "$f" "^ +$name +p50: cdcfusion +([0-9.]+) [^,]*, PostgreSQL +([0-9.]+) [^,]*, ratio ([0-9.]+)") || return 0
  IFS=$'\t' read -r ours theirs ratio <<<"$found"
  echo "$ratio ($ours against $theirs µs)"
}

read_pgwire() {
  local f=$OUT/pgwire.out v='' found ours theirs ratio clients
  set_value pg_select1 "$(pg_latency "$f" 'SELECT 1 \(simple\)')"
  set_value pg_literal "$(pg_latency "$f" 'PK lookup, literal \(simple\)')"
  set_value pg_prepared "$(pg_latency "$f" 'PK lookup, prepared')"
  set_value pg_index "$(pg_latency "$f" 'secondary-index lookup, prepared')"
  set_value pg_range "$(pg_latency "$f" 'PK range of 1,000 rows, prepared')"
  if found=$(grab "$f" '^ +large result \(binary\) +: cdcfusion ([0-9.]+) rows/s, PostgreSQL ([0-9.]+) rows/s, ratio ([0-9.]+)'); then
    IFS=$'\t' read -r ours theirs ratio <<<"$found"
    v="$ratio ($(human "$ours") against $(human "$theirs") rows/s)"
  fi
  set_value pg_scan "$v"
  v=''
  if found=$(grab "$f" '^ +pgbench -M prepared, -c ([0-9]+) +: cdcfusion ([0-9.]+) tps, PostgreSQL ([0-9.]+) tps, ratio ([0-9.]+)'); then
    IFS=$'\t' read -r clients ours theirs ratio <<<"$found"
    v="$ratio ($(human "$ours") against $(human "$theirs") transactions/s, $clients clients)"
  elif grep -q 'pgbench -M prepared: skipped' "$f" 2>/dev/null; then
    echo "bench-report: pgbench is not installed, so the pgbench figure was not measured" >&2
  fi
  set_value pg_pgbench "$v"
}

read_durable() {
  local f=$OUT/durable.out v='' found snapshot restart times checkpoint state ours ref ratio
  if snapshot=$(grab "$f" '^ +initial snapshot to ready \(reference\): ([^ ]+)$') &&
    found=$(grab "$f" '^ +restart to caught up: ([^ ]+) .*; ([0-9.]+)x faster than the snapshot'); then
    IFS=$'\t' read -r restart times <<<"$found"
    v="$times ($restart against $snapshot)"
  fi
  set_value durable_restart "$v"
  v=''
  if checkpoint=$(grab "$f" '^ +checkpoint on a clean stop: ([^ ]+)$'); then
    v=$checkpoint
    if state=$(grab "$f" '^state of ([0-9]+) rows \(7 columns\), ([0-9.]+) MiB on disk'); then
      v+=" ($(human "${state%%$'\t'*}") rows, ${state#*$'\t'} MiB on disk)"
    fi
  fi
  set_value durable_checkpoint "$v"
  v=''
  if found=$(grab "$f" '^ +in memory: ([0-9]+) changes/s; durable, checkpoint every [^:]+: ([0-9]+) changes/s; ratio ([0-9.]+)'); then
    IFS=$'\t' read -r ref ours ratio <<<"$found"
    v="$ratio ($(human "$ours") against $(human "$ref") changes/s)"
  fi
  set_value durable_ingest "$v"
}

read_reconcile() {
  local f=$OUT/reconcile.out v='' found ours theirs ratio bytes size percent
  if found=$(grab "$f" '^ +bytes moved: ([0-9]+) of the table.s ([0-9]+) Arrow bytes \(([0-9.]+) %\)'); then
    IFS=$'\t' read -r bytes size percent <<<"$found"
    v="$percent % ($(human "$bytes") of $(human "$size") bytes)"
  fi
  set_value reconcile_bytes "$v"
  v=''
  if found=$(grab "$f" '^ +time: reconcile ([0-9.]+) s, FULL OUTER JOIN of mysql_snapshot ([0-9.]+) s, ratio ([0-9.]+)'); then
    IFS=$'\t' read -r ours theirs ratio <<<"$found"
    v="$ratio ($ours s against $theirs s)"
  fi
  set_value reconcile_time "$v"
}

read_sinks() {
  local f=$OUT/sinks.out kind id found ratio cpu rate p50 p99
  for kind in Parquet Postgres Delta; do
    id=$(echo "$kind" | tr '[:upper:]' '[:lower:]')
    found=$(grab "$f" "^$kind: median ratio sink/direct ([0-9.]+) \\(CPU-seconds direct/sink ([0-9.]+)\\)") || found=''
    if [ -n "$found" ]; then
      IFS=$'\t' read -r ratio cpu <<<"$found"
      set_value "sink_$id" "$ratio (CPU $cpu)"
    else
      set_value "sink_$id" ''
    fi
    found=$(grab "$f" "^freshness \\($kind\\) at ([0-9]+) changes/s, .* p50 ([0-9]+) ms, p99 ([0-9]+) ms") || found=''
    if [ -n "$found" ]; then
      IFS=$'\t' read -r rate p50 p99 <<<"$found"
      set_value "fresh_$id" "$(human "$p50") / $(human "$p99") ms"
    else
      set_value "fresh_$id" ''
    fi
  done
}

read_views() {
  local f=$OUT/views.out v='' found ours theirs ratio
  if found=$(grab "$f" '^ +point lookup p50: cdcfusion ([^,]+), MemTable ([^,]+), ratio ([0-9.]+)'); then
    IFS=$'\t' read -r ours theirs ratio <<<"$found"
    v="$ratio ($ours against $theirs)"
  fi
  set_value views_lookup "$v"
  v=''
  if found=$(grab "$f" '^ +full scan: cdcfusion ([0-9]+) rows/s, MemTable ([0-9]+) rows/s, ratio ([0-9.]+)'); then
    IFS=$'\t' read -r ours theirs ratio <<<"$found"
    v="$ratio ($(human "$ours") against $(human "$theirs") rows/s)"
  fi
  set_value views_scan "$v"
  v=''
  if found=$(grab "$f" '^ +memory: state ([0-9.]+) MiB, Arrow size of the rows ([0-9.]+) MiB, ratio ([0-9.]+)'); then
    IFS=$'\t' read -r ours theirs ratio <<<"$found"
    v="$ratio ($ours MiB against $theirs MiB)"
  fi
  set_value views_memory "$v"
}

for name in "${!RAN[@]}"; do
  case $name in
    capture) read_capture ;;
    decode) read_decode ;;
    snapshot) read_snapshot ;;
    stream) read_stream ;;
    pgwire) read_pgwire ;;
    durable) read_durable ;;
    reconcile) read_reconcile ;;
    sinks) read_sinks ;;
    views) read_views ;;
    *)
      echo "bench-report: bench $name has no reader here; add one to scripts/bench-report.sh" >&2
      failed=1
      ;;
  esac
done

# --- rewriting the table --------------------------------------------------------------------

trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  s=${s%"${s##*[![:space:]]}"}
  printf '%s' "$s"
}

# The old rows, by "bench|figure".
declare -A OLD=()
old_keys=()
in_table=0
while IFS= read -r line; do
  if [ "$line" = "$START" ]; then in_table=1; continue; fi
  if [ "$line" = "$END" ]; then in_table=0; continue; fi
  [ "$in_table" = 1 ] || continue
  [[ $line == '|'* ]] || continue
  [ "$line" = "$HEADER" ] || [ "$line" = "$SEPARATOR" ] && continue
  IFS='|' read -ra cells <<<"$line"
  key="$(trim "${cells[1]:-}")|$(trim "${cells[2]:-}")"
  OLD[$key]=$line
  old_keys+=("$key")
done <"$DOC"

table="$HEADER"$'\n'"$SEPARATOR"
declare -A KNOWN=()
for row in "${ROWS[@]}"; do
  IFS='|' read -r id bench figure reference goal <<<"$row"
  key="$bench|$figure"
  KNOWN[$key]=1
  if [ -n "${VALUE[$id]:-}" ]; then
    value=${VALUE[$id]//|/\/}
    table+=$'\n'"| $bench | $figure | $reference | $value | $goal | $TODAY | $BUILD | $MACHINE |"
  elif [ -n "${OLD[$key]:-}" ]; then
    table+=$'\n'"${OLD[$key]}"
  else
    table+=$'\n'"| $bench | $figure | $reference | not measured yet | $goal | — | — | — |"
  fi
done
# Rows the script does not know (added by hand) are kept, after its own.
for key in "${old_keys[@]}"; do
  if [ -z "${KNOWN[$key]:-}" ]; then
    echo "bench-report: keeping a row this script does not measure: $key" >&2
    table+=$'\n'"${OLD[$key]}"
  fi
done

new=$(mktemp "$DOC.XXXXXX")
# The table goes through the environment: awk's -v would read backslashes in it as escapes.
TABLE=$table awk -v start="$START" -v end="$END" '
  $0 == start { print; print ENVIRON["TABLE"]; skipping = 1; next }
  $0 == end { skipping = 0 }
  !skipping { print }
' "$DOC" >"$new"
mv "$new" "$DOC"
echo "bench-report: $DOC updated (${#VALUE[@]} figures; build $BUILD; $MACHINE)" >&2
exit "$failed"
