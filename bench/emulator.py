#!/usr/bin/python3
"""stoker bench benchmarks E1-E2 (issue 3). E3 (gen write rate) is
bench/gen_write.sh.

E1 emulator overhead: data in RAM (small records, page cache warmed), a
   compute time of 10 ms, N = 1, 8, 64: AU must be at least 0.99 (the step
   overhead under 100 us). Reported with the step overhead implied by AU.
E2 CPU cost per emulated accelerator on resnet50/h100 records (114,660 B,
   batch 400, 0.224 s): CPU-seconds per 1000 samples, and the largest N at
   AU >= 0.90 on this machine with read threads = cores (--find-max).

usage: emulator.py [--rounds N] [--work DIR] [--only E1,E2]
Writes bench/results/emulator.json."""
import argparse
import json
import os
import re
import statistics
import sys
import time

from benchlib import BENCH, NCORES, ROOT, STK, files_of, pgpgin_kib, sh, warm









def bench_json(args):
    out = sh([STK, "bench", "-q", "--json", "-", *args])
    return json.loads(out[out.index("{"):])  # the summary lines come after the JSON


def e1(work, rounds):
    rows = {}
    # Small records, so the loader is far from its limits and what is
    # measured is the emulator's own per-step overhead.
    batch, record, steps = 4, 1024, 40
    for n in (1, 8, 64):
        d = os.path.join(work, f"e1-n{n}")
        samples = n * batch * steps
        args = ["--data", d, "--files", str(n), "--samples-per-file", str(batch * steps),
                "--record-size", str(record), "--batch", str(batch), "--accelerators", str(n),
                "--epochs", "3", "--compute-s", "0.010", "--read-threads", str(NCORES)]
        sh([STK, "bench", "-q", *args, "--epochs", "1"])  # generate once
        aus = []
        for _ in range(rounds):
            warm(files_of(d))
            p0 = pgpgin_kib()
            r = bench_json(args)
            aus.append({"au": r["au"], "disk_read_kib": pgpgin_kib() - p0,
                        "samples_per_s": r["samples_per_s"]})
        au = statistics.median(a["au"] for a in aus)
        # AU = compute / (compute + overhead) per step -> overhead = c (1/AU - 1)
        over_us = 0.010 * (1 / au - 1) * 1e6
        rows[str(n)] = {"au": au, "step_overhead_us": over_us, "rounds": aus, "samples": samples,
                        "pass": au >= 0.99}
        print(f"E1  N={n:3d}: AU {au:.4f} (median of {rounds}); step overhead {over_us:.0f} us  "
              f"[AU >= 0.99: {'pass' if au >= 0.99 else 'FAIL'}]")
    return rows


def e2(work, rounds):
    d = os.path.join(work, "e2-resnet50")
    files, spf = 16, 1251
    base = ["--workload", "resnet50", "--accel", "h100", "--data", d, "--files", str(files),
            "--samples-per-file", str(spf), "--read-threads", str(NCORES), "--epochs", "3"]
    sh([STK, "bench", "-q", *base, "--accelerators", "1", "--epochs", "1"])  # generate once
    cpu, maxn, trials, loads = [], [], [], []
    fm_json = os.path.join(work, "e2-find-max.json")
    for _ in range(rounds):
        warm(files_of(d))
        p0 = pgpgin_kib()
        loads.append(os.getloadavg()[0])  # the machine is shared: load beside every round
        r = bench_json([*base, "--accelerators", "2"])
        cpu.append(r["cpu_s_per_1000_samples"])
        out = sh([STK, "bench", "-q", *base, "--find-max", "--json", fm_json])
        m = re.search(r"largest accelerator count meeting AU >= [0-9.]+: (\d+)", out)
        maxn.append(int(m.group(1)) if m else 0)
        with open(fm_json) as f:
            trials.append(json.load(f)["trials"])  # every trial: AU, warm-up, verdict
        print(out.rstrip())
        print(f"    disk reads during the round: {pgpgin_kib() - p0} KiB; load average {loads[-1]:.2f}")
    res = {"cpu_s_per_1000_samples": statistics.median(cpu), "max_accelerators": statistics.median(maxn),
           "rounds_cpu": cpu, "rounds_max": maxn, "rounds_trials": trials, "rounds_load1": loads,
           "read_threads": NCORES,
           "dataset": f"{files} files x {spf} records of 114660 B (page cache)"}
    print(f"E2  resnet50/h100 records: {res['cpu_s_per_1000_samples']:.3f} CPU-s per 1000 samples; "
          f"largest N at AU >= 0.90 with {NCORES} read threads: {res['max_accelerators']:.0f} "
          f"(rounds: {maxn})")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=os.environ.get("STOKER_BENCH_DIR", "/var/tmp/stoker-bench"))
    ap.add_argument("--only", default="E1,E2")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    want = set(a.only.upper().split(","))
    res = {"machine": {"cores": NCORES}, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if "E1" in want:
        res["E1"] = e1(a.work, a.rounds)
    if "E2" in want:
        res["E2"] = e2(a.work, a.rounds)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "emulator.json"), "w") as f:
        json.dump(res, f, indent=2)
    print("wrote bench/results/emulator.json")


if __name__ == "__main__":
    sys.exit(main())
