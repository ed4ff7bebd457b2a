# Job-level simulator benchmarks S4-S7 (issue 12), sourced by bench/sim.sh
# so `make bench B=sim` runs them: S4 one Tiresias run on the Pollux
# artifact's workload 6, S5 one Pollux run on it (the artifact documents
# up to 30 minutes), S6 the whole JCT table (3 policies x 8 workloads x 4
# loads) on 2 threads, S7 the Philly trace through Tiresias on 64 x 8 GPUs
# (events: arrivals, completions and scheduling rounds, per second).
# Writes bench/results/sim_jobs.json.
sim_jobs_bench() {
  local STK=build/stoker DATA="${STOKER_DATA:-../shared/data}"
  local OUT=bench/results/sim_jobs.json W6="$DATA/pollux/workloads/workload-6.csv"
  if [ ! -f "$W6" ]; then
    echo "sim S4-S7: the Pollux artifact inputs are not in $DATA/pollux; skipped"
    printf '{"bench":"sim_jobs","skipped":"pollux inputs not found in %s"}\n' "$DATA" > "$OUT"
    return 0
  fi
  local T
  T=$(mktemp -d "${TMPDIR:-/tmp}/stoker-bench-simjobs.XXXXXX")
  local t0 t1
  t0=$(date +%s.%N); "$STK" sim --jobs "$W6" --job-policy tiresias --json > "$T/s4.json"; t1=$(date +%s.%N)
  echo "$t0 $t1" > "$T/s4.time"
  t0=$(date +%s.%N); "$STK" sim --jobs "$W6" --job-policy pollux --json > "$T/s5.json"; t1=$(date +%s.%N)
  echo "$t0 $t1" > "$T/s5.time"
  t0=$(date +%s.%N); "$STK" sim --pollux-table --threads 2 -q > "$T/s6.txt"; t1=$(date +%s.%N)
  echo "$t0 $t1" > "$T/s6.time"
  if [ -f "$DATA/philly/philly.csv" ]; then
    t0=$(date +%s.%N)
    "$STK" sim --jobs "$DATA/philly/philly.csv" --job-policy tiresias --cluster 64x8 --json > "$T/s7.json"
    t1=$(date +%s.%N)
    echo "$t0 $t1" > "$T/s7.time"
  fi
  /usr/bin/python3 - "$T" "$OUT" "$(uptime)" <<'PY'
import json, os, sys
t, out, load = sys.argv[1], sys.argv[2], sys.argv[3]
def wall(n):
    a, b = map(float, open(f"{t}/{n}.time").read().split())
    return b - a
res = {"bench": "sim_jobs", "load": load.strip()}
for n in ("s4", "s5"):
    r = json.load(open(f"{t}/{n}.json"))["runs"][0]
    res[n] = {"policy": r["policy"], "jct_mean": r["jct_mean"], "sim_s": r["wall_s"], "wall_s": wall(n)}
res["s5"]["artifact_s"] = 1800
res["s5"]["speedup_vs_30min"] = 1800 / res["s5"]["wall_s"]
res["s6"] = {"wall_s": wall("s6"), "runs": 96, "threads": 2, "table": open(f"{t}/s6.txt").read()}
if os.path.exists(f"{t}/s7.json"):
    r = json.load(open(f"{t}/s7.json"))["runs"][0]
    events = 2 * r["jobs"] + r["rounds"]
    res["s7"] = {"jobs": r["jobs"], "rounds": r["rounds"], "events": events, "sim_s": r["wall_s"],
                 "wall_s": wall("s7"), "events_per_s": events / r["wall_s"]}
json.dump(res, open(out, "w"), indent=1)
print("S4 tiresias workload-6: %.3f s (simulation %.3f s), mean JCT %.1f s" % (res["s4"]["wall_s"], res["s4"]["sim_s"], res["s4"]["jct_mean"]))
print("S5 pollux workload-6:   %.1f s, %.0fx faster than the artifact's 30 min" % (res["s5"]["wall_s"], res["s5"]["speedup_vs_30min"]))
print("S6 the JCT table (96 runs, 2 threads): %.1f s" % res["s6"]["wall_s"])
if "s7" in res:
    print("S7 philly through tiresias: %d events in %.2f s = %.0f events/s" % (res["s7"]["events"], res["s7"]["sim_s"], res["s7"]["events_per_s"]))
print("load:", res["load"])
PY
  rm -rf "$T"
}
