#!/usr/bin/env bash
# T2-T4 of issue 18 (token windows; T1 is bench/megatron_index.sh): writes
# two synthetic Megatron corpora with `stoker gen --format megatron` in a
# temporary folder (about 400 MB, and a 1.2 GB window index), warms them
# into the page cache, builds their indices once, then runs
# build/bench/tokens (bench/tokens.c):
#   T3 steady state: tokens/s a loader delivers at seq_len 8192 (uint16
#      corpus, int32 and int64 batches of 8 windows, 2 workers) against a
#      memcpy ceiling measured in the same run (`stoker doctor`'s method),
#      and the window copy alone on one thread (`tokens copy`); then the
#      same on a copy of the corpus dropped from the page cache and read
#      the first time by the loader (cold: its page cache in 2 MiB folios);
#   T4 resume: a state at a position in the last tenth of 10^8 windows
#      (seq_len 4096) to the first batch;
#   T2 start-up: N processes launched at once, each opening a corpus and
#      its (existing) index and taking a first batch: corpus c at seq_len
#      8192 (one epoch, a 0.2 MB index) and corpus long's 10^8 windows (a
#      1.2 GB index, which every open checks whole against its CRC32C).
# Prints a table and writes bench/results/tokens.json. ROUNDS=N (default
# 5) rounds for T3/T4; PROCS="8 64" the T2 process counts; TOKENS_DIR=DIR
# keeps the corpora there (reused when present) instead of a temp folder;
# BUILD=build dir.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
PROCS=${PROCS:-8 64}
make --no-print-directory BUILD="$BUILD" "$BUILD/stoker" "$BUILD/bench/tokens" >/dev/null
STK=$PWD/$BUILD/stoker
TOK=$PWD/$BUILD/bench/tokens
if [ -n "${TOKENS_DIR:-}" ]; then
  DIR=$TOKENS_DIR
  mkdir -p "$DIR"
else
  DIR=$(mktemp -d "${TMPDIR:-/var/tmp}/stoker-tokens.XXXXXX")
  trap 'rm -rf "$DIR"' EXIT
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"; [ -n "${TOKENS_DIR:-}" ] || rm -rf "$DIR"' EXIT

# Corpus c: 10^5 documents of about 1024 tokens (normal, sd 300), uint16,
# 1.02 * 10^8 tokens, 205 MB. Corpus long: 1000 documents of about 10^5
# tokens, 0.99 * 10^8 tokens, 198 MB (few documents keep the document index
# of 10^8 windows small).
[ -f "$DIR/c/shard-00000.bin" ] ||
  "$STK" gen "$DIR/c" --format megatron --samples 100000 --doc-len 1024 --doc-len-stdev 300 -q
[ -f "$DIR/long/shard-00000.bin" ] ||
  "$STK" gen "$DIR/long" --format megatron --samples 1000 --doc-len 100000 --doc-len-stdev 30000 -q
C=$DIR/c/shard-00000
L=$DIR/long/shard-00000
pgpgin() { awk '$1 == "pgpgin" { printf "%.0f\n", $2 * 1024 }' /proc/vmstat; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# Build the indices (not timed here: T1 times builds) and warm every file.
"$TOK" t2 "$C" 8192 0 "$(date +%s%N)" >"$OUT/warm_c.json"
"$TOK" t4 "$L" 4096 100000000 1 >"$OUT/warm_long.json"
cat "$DIR"/c/* "$DIR"/long/* >/dev/null

LOAD_BEFORE=$(load)
D0=$(pgpgin)
"$TOK" t3 "$C" 8192 int32 "$ROUNDS" 1.0 2 8 >"$OUT/t3_int32.json"
"$TOK" t3 "$C" 8192 int64 "$ROUNDS" 1.0 2 8 >"$OUT/t3_int64.json"
"$TOK" copy "$C" 8192 int32 "$ROUNDS" >"$OUT/copy_int32.json"
"$TOK" copy "$C" 8192 int64 "$ROUNDS" >"$OUT/copy_int64.json"
D1=$(pgpgin)
# T3 cold: a copy of corpus c dropped from the page cache, read the first
# time through the loader's own (MADV_HUGEPAGE) mapping, as a corpus read
# from disk is; then measured as above. Its own copy, so that corpus c
# keeps the small folios `cat` gave it (the page cache keeps a file's
# folios until they are dropped).
mkdir -p "$DIR/cold"
cp "$C.bin" "$C.idx" "$DIR/cold/"
K=$DIR/cold/shard-00000
"$TOK" t2 "$K" 8192 0 "$(date +%s%N)" >"$OUT/warm_cold.json"
"$TOK" evict "$K.bin" >"$OUT/evict.json"
D4=$(pgpgin)
"$TOK" t3 "$K" 8192 int32 1 2.0 2 8 >"$OUT/t3_cold_first.json"
D5=$(pgpgin)
"$TOK" t3 "$K" 8192 int32 "$ROUNDS" 1.0 2 8 >"$OUT/t3_cold_int32.json"
"$TOK" t3 "$K" 8192 int64 "$ROUNDS" 1.0 2 8 >"$OUT/t3_cold_int64.json"
rm -rf "$DIR/cold"
D1C=$(pgpgin)
"$TOK" t4 "$L" 4096 100000000 "$ROUNDS" >"$OUT/t4.json"
D2=$(pgpgin)
t2() { # NAME PREFIX SEQ SAMPLES N: N processes launched at once
  local launch i
  launch=$(date +%s%N)
  for i in $(seq "$5"); do "$TOK" t2 "$2" "$3" "$4" "$launch" >"$OUT/$1.$i.out" & done
  wait
  cat "$OUT/$1".*.out >"$OUT/$1.jsonl"
}
for n in $PROCS; do t2 "t2_c_$n" "$C" 8192 0 "$n"; done
for n in $PROCS; do t2 "t2_long_$n" "$L" 4096 100000000 "$n"; done
D3=$(pgpgin)

/usr/bin/python3 - "$OUT" "$LOAD_BEFORE" "$(load)" "$D0" "$D1" "$D2" "$D3" "$(nproc)" "$PROCS" \
  "$D4" "$D5" "$D1C" <<'EOF'
import json, os, statistics, sys
out, load0, load1 = sys.argv[1], sys.argv[2], sys.argv[3]
d0, d1, d2, d3 = (int(x) for x in sys.argv[4:8])
cores, procs = int(sys.argv[8]), [int(x) for x in sys.argv[9].split()]
d4, d5, d1c = (int(x) for x in sys.argv[10:13])
rd = lambda n: json.load(open(os.path.join(out, n)))
res = {"load_before": load0, "load_after": load1, "cores": cores,
       "corpora": {"c": "10^5 documents, about 1024 tokens each (normal, sd 300), uint16, "
                        "102,438,200 tokens", "long": "1000 documents, about 10^5 tokens "
                        "each (normal, sd 30000), uint16, about 0.99 * 10^8 tokens"}}
print("issue 18 T2-T4 (token windows), %d cores, load %s before, %s after" % (cores, load0, load1))
print()
print("T3 steady state, corpus c, seq_len 8192, batches of 8, 2 workers, medians of rounds")
print("  %-6s %12s %12s %12s %7s %9s %9s" % ("type", "Mtokens/s", "GB/s out", "memcpy GB/s",
                                                "ratio", "w/ mask", "per CPU"))
for ty in ("int32", "int64"):
    r = rd("t3_%s.json" % ty)
    res["T3_" + ty] = r
    print("  %-6s %12.0f %12.2f %12.2f %7.2f %9.2f %9.2f" % (ty, r["tokens_per_s"] / 1e6,
          r["token_bytes_per_s"] / 1e9, r["memcpy_bytes_per_s"] / 1e9, r["ratio"],
          r["ratio_with_mask"], r["ratio_cpu"]))
for ty in ("int32", "int64"):
    r = rd("t3_%s.json" % ty)
    print("  %-6s the loader's CPU: workers %.0f%% (%.0f ns a window), reader %.0f%%, consumer %.0f%%"
          % (ty, 100 * r["cpu_share_decode"], r["decode_cpu_ns_per_window"],
             100 * r["cpu_share_read"], 100 * r["cpu_share_consumer"]))
for ty in ("int32", "int64"):
    r = rd("copy_%s.json" % ty)
    res["T3_copy_" + ty] = r
    print("  %-6s the window copy alone, one thread: %.0f ns of CPU a window, %.2f of memcpy"
          " per CPU-second" % (ty, r["cpu_ns_per_window"], r["ratio_cpu"]))
res["T3_disk_read_bytes"] = d1 - d0
print("  ratio: bytes of tokens written to the batches per second / bytes memcpy copies per")
print("  second (2 threads, 128 MiB each); w/ mask adds the loss mask's byte per token.")
print("  Units: memcpy reads and writes each byte once; the loader reads the uint16 corpus at")
print("  2 bytes a token and writes 4 (int32) or 8 (int64), and the ratio counts the bytes")
print("  written: an int32 row is compared at twice the bytes it reads, an int64 row at 4x;")
print("  per CPU: the same per second of CPU time (the loader process's, the memcpy threads'),")
print("  which other work on the machine moves far less than the wall-clock ratio.")
print("  disk reads during T3 (system-wide pgpgin): %.1f MB" % ((d1 - d0) / 1e6))
print("  corpus .bin mapped in 2 MiB pages: %.0f MB (as the page cache holds it; a corpus"
      % (rd("t3_int32.json").get("bin_pmd_mapped_bytes", 0) / 1e6))
print("  written here and read by cat lies in small folios: docs/internals/tokens.md)")
first = rd("t3_cold_first.json")
res["T3_cold_first_read"] = first
res["T3_cold_first_read_disk_bytes"] = d5 - d4
for ty in ("int32", "int64"):
    r = rd("t3_cold_%s.json" % ty)
    res["T3_cold_" + ty] = r
    print("  %-6s %12.0f %12.2f %12.2f %7.2f %9.2f %9.2f  cold" % (ty, r["tokens_per_s"] / 1e6,
          r["token_bytes_per_s"] / 1e9, r["memcpy_bytes_per_s"] / 1e9, r["ratio"],
          r["ratio_with_mask"], r["ratio_cpu"]))
res["T3_cold_disk_read_bytes"] = d1c - d5
print("  cold: a copy of c dropped from the page cache (tokens evict), read the first time by")
print("  the loader through its mapping (%.1f MB from disk), then measured (%.1f MB of disk"
      % ((d5 - d4) / 1e6, (d1c - d5) / 1e6))
print("  reads); its .bin mapped in 2 MiB pages: %.0f of %.0f MB"
      % (rd("t3_cold_int32.json").get("bin_pmd_mapped_bytes", 0) / 1e6,
         rd("evict.json")["bytes"] / 1e6))
print()
r = rd("t4.json")
res["T4"] = r
res["T4_disk_read_bytes"] = d2 - d1c
print("T4 resume, corpus long, seq_len 4096, %d windows (index %s)" % (r["windows"],
      "built" if r["index_built"] else "mapped"))
print("  state -> first batch: median %.3f ms, max %.3f ms over %d positions in the last tenth"
      % (r["resume_to_first_batch_ms_median"], r["resume_to_first_batch_ms_max"], r["rounds"]))
print("  (stk_tokens_open before it, mapping and checking the index: %.0f ms)" % r["tokens_open_ms"])
print()
print("T2 start-up: N processes launched at once, time from launch to each one's first batch")
print("  %-28s %5s %9s %9s %9s %8s" % ("corpus", "N", "median s", "max s", "in-proc", "rebuilt"))
def t2(name, label):
    rows = [json.loads(l) for l in open(os.path.join(out, name + ".jsonl"))]
    f = [x["first_batch_s"] for x in rows]
    agg = {"processes": len(rows), "first_batch_s_median": statistics.median(f),
           "first_batch_s_max": max(f),
           "in_process_s_max": max(x["in_process_s"] for x in rows),
           "tokens_open_s_median": statistics.median(x["tokens_open_s"] for x in rows),
           "rebuilt": sum(x["index_built"] for x in rows), "all": rows}
    res[name] = agg
    print("  %-28s %5d %9.3f %9.3f %9.3f %8d" % (label, len(rows), agg["first_batch_s_median"],
          agg["first_batch_s_max"], agg["in_process_s_max"], agg["rebuilt"]))
for n in procs:
    t2("t2_c_%d" % n, "c, seq 8192, 12,504 windows")
for n in procs:
    t2("t2_long_%d" % n, "long, seq 4096, 10^8 windows")
res["T2_disk_read_bytes"] = d3 - d2
print("  disk reads during T2: %.1f MB; in-proc: the slowest process's own time" % ((d3 - d2) / 1e6))
os.makedirs("bench/results", exist_ok=True)
json.dump(res, open("bench/results/tokens.json", "w"), indent=1)
print("\nwrote bench/results/tokens.json")
EOF
