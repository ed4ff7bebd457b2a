#!/usr/bin/env bash
# Simulator benchmarks: S4-S7 (issue 12, the job-level simulator; see
# bench/sim_jobs.bash), S8 (issue 22, Sia; bench/sim_sia.bash), then
# S1-S3 (issue 5) on the openb traces in ../shared/data/openb: S1 one
# policy x one seed to 130% (all six policies, FGD is the slowest), S2 the
# paper's table (6 policies x 10 seeds on 2 threads), S3 a synthetic
# cluster of 100,000 GPUs with the workload inflated in proportion (the
# same 130% of its capacity). Prints a short table and writes
# bench/results/sim.json. Times are wall clock on this machine; CPU time
# of the simulating thread is reported beside them.
set -euo pipefail
cd "$(dirname "$0")/.."
STK=build/stoker
DATA="${STOKER_DATA:-../shared/data}/openb"
OUT=bench/results/sim.json
mkdir -p bench/results
# S4-S7, the job-level simulator (bench/sim_jobs.bash).
source bench/sim_jobs.bash
sim_jobs_bench
# S8, Sia on newTrace (bench/sim_sia.bash).
source bench/sim_sia.bash
sim_sia_bench
NODES="$DATA/openb_node_list_gpu_node.csv"
PODS="$DATA/openb_pod_list_default.csv"
if [ ! -f "$NODES" ] || [ ! -f "$PODS" ]; then
  echo "sim: the openb traces are not in $DATA; skipped"
  printf '{"bench":"sim","skipped":"openb traces not found in %s"}\n' "$DATA" > "$OUT"
  exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/stoker-bench-sim.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

now() { date +%s.%N; }

# S1: each policy, seed 42, default trace to 130%.
for p in Random DotProd GpuClustering GpuPacking BestFit FGD; do
  t0=$(now)
  "$STK" sim --nodes "$NODES" --pods "$PODS" --policy "$p" --seed 42 --json > "$TMP/s1_$p.json"
  t1=$(now)
  echo "$t0 $t1" > "$TMP/s1_$p.time"
done

# S2: the whole table on 2 threads.
t0=$(now)
"$STK" sim --experiment --nodes "$NODES" --pods "$PODS" --seeds 10 --threads 2 --json -q > "$TMP/s2.json"
t1=$(now)
echo "$t0 $t1" > "$TMP/s2.time"

# S3: 16 copies of the GPU-node list plus 76 8-GPU nodes = 100,000 GPUs.
awk -F, 'NR == 1 { print; next } { row[++n] = $0 }
  END { k = 0
        for (r = 0; r < 16; r++) for (i = 1; i <= n; i++) {
          split(row[i], f, ","); printf "synth-%06d,%s,%s,%s,%s\n", k++, f[2], f[3], f[4], f[5] }
        for (j = 0; j < 76; j++) printf "synth-%06d,96000,393216,8,G2\n", k++ }' "$NODES" > "$TMP/nodes100k.csv"
for p in FGD BestFit Random; do
  t0=$(now)
  "$STK" sim --nodes "$TMP/nodes100k.csv" --pods "$PODS" --policy "$p" --seed 42 --json > "$TMP/s3_$p.json"
  t1=$(now)
  echo "$t0 $t1" > "$TMP/s3_$p.time"
done

python3 - "$TMP" "$OUT" <<'EOF'
import json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
def load(name):
    with open(os.path.join(tmp, name + ".json")) as f:
        d = json.load(f)
    with open(os.path.join(tmp, name + ".time")) as f:
        t0, t1 = map(float, f.read().split())
    return d, t1 - t0
res = {"bench": "sim", "machine_cpus": os.cpu_count()}
print("S1  one policy x one seed, openb default trace to 130% (1,213 nodes, 6,212 GPUs)")
print("    %-14s %8s %8s %8s %10s %12s %9s" % ("policy", "wall s", "cpu s", "process", "events", "events/s", "alloc@130"))
s1 = {}
for p in ["Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD"]:
    d, wall = load("s1_" + p)
    r = d["runs"][0]
    s1[p] = {"sim_wall_s": r["wall_s"], "sim_cpu_s": r["cpu_s"], "process_wall_s": wall,
             "events": r["events"], "events_per_s": r["events"] / r["wall_s"],
             "alloc_at_130": r["alloc"][130]}
    print("    %-14s %8.3f %8.3f %8.3f %10d %12.0f %9.2f" % (p, r["wall_s"], r["cpu_s"], wall, r["events"],
                                                          r["events"] / r["wall_s"], r["alloc"][130]))
res["S1"] = s1
d, wall = load("s2")
print("S2  the table: 6 policies x 10 seeds on 2 threads: %.2f s (target < 30 s)" % wall)
rows = {}
for p in d["policies"]:
    rows[p["policy"]] = {"alloc_at_100": p["alloc_at_100"], "alloc_at_130": p["alloc_at_end"],
                         "published_at_100": p["published_at_100"], "published_at_130": p["published_at_130"]}
    print("    %-14s %6.2f (paper %6.2f)  %6.2f (paper %6.2f)" % (p["policy"], p["alloc_at_100"], p["published_at_100"],
                                                            p["alloc_at_end"], p["published_at_130"]))
res["S2"] = {"wall_s": wall, "runs": len(d["runs"]), "threads": 2, "table": rows}
print("S3  synthetic cluster of 100,000 GPUs (19,484 nodes), default trace inflated to 130% of it")
s3 = {}
for p in ["FGD", "BestFit", "Random"]:
    d, wall = load("s3_" + p)
    r = d["runs"][0]
    us = r["wall_s"] * 1e6 / r["pods"]
    s3[p] = {"sim_wall_s": r["wall_s"], "sim_cpu_s": r["cpu_s"], "process_wall_s": wall, "decisions": r["pods"],
             "us_per_decision": us, "us_cpu_per_decision": r["cpu_s"] * 1e6 / r["pods"],
             "alloc_at_130": r["alloc"][130]}
    print("    %-8s %d decisions in %.2f s (%.2f s CPU): %.1f us per placement decision; alloc@130 %.2f%%"
          % (p, r["pods"], r["wall_s"], r["cpu_s"], us, r["alloc"][130]))
res["S3"] = s3
with open(out, "w") as f:
    json.dump(res, f, indent=2)
    f.write("\n")
print("wrote", out)
EOF
