#!/usr/bin/python3
"""MLPerf Storage workloads on DLIO's own data layout (issue 9, section 1).

D1 unet3d-h100 from the page cache: DLIO's npz files (np.savez(x, y), one
   146.6 MB +- 68.3 MB sample each, written by NumPy as DLIO's generator
   writes them; by `stoker gen` where NumPy is missing), batch 7,
   0.323 s per step. The target N is the largest the memory-copy ceiling
   allows: floor(0.9 x the 2-thread memcpy rate that `stoker doctor`
   measures / the demand of one accelerator (7 x 146.6 MB / 0.323 s)). The
   run at that N must keep AU >= 0.90. Files: enough for 2 steps per epoch
   at that N, and few enough to stay in the page cache (half the RAM).
D2 resnet50-h100 on DLIO's layout: 32,000 npz files of one 114,660-byte
   sample each (x uint8 of shape (338, 339, 1), y), batch 400, 0.224 s:
   the largest N at AU >= 0.90 (--find-max); the goal is at least 10.
Both report CPU-seconds per 1000 samples (the process's CPU time over the
samples it delivered), the disk reads during the run (/proc/vmstat) and the
load average beside every figure: on a shared machine the figures are
preliminary.

usage: dlio.py [--rounds N] [--work DIR] [--only D1,D2]
Writes bench/results/dlio.json."""
import argparse
import json
import math
import os
import re
import statistics
import sys
import time

from benchlib import NCORES, ROOT, STK, files_of, pgpgin_kib, sh, warm

UNET3D_BYTES, UNET3D_STDEV, UNET3D_BATCH, UNET3D_COMPUTE = 146600628, 68341808, 7, 0.323
RESNET_BYTES, RESNET_BATCH, RESNET_COMPUTE, RESNET_FILES = 114660, 400, 0.224, 32000


def load():
    return os.getloadavg()[0]


def bench_json(args):
    out = sh([STK, "bench", "-q", "--json", "-", *args])
    return json.loads(out[out.index("{"):])


def copy_ceiling():
    """The 2-thread memcpy rate in bytes/s, from stoker doctor: the best of
    three runs (a ceiling is what the machine can do; on this shared VM one
    run measured anywhere from 23 to 43 GiB/s)."""
    best = 0.0
    for _ in range(3):
        out = sh([STK, "doctor", "--only", "memcpy", "--threads", "2", "--quick", "--json", "-"])
        f = json.loads(out[out.index("{"):])["figures"]["memcpy"]
        if not f.get("valid") or not f.get("value"):
            raise SystemExit(f"dlio.py: stoker doctor could not measure memcpy: {f.get('reason')}")
        best = max(best, float(f["value"]))
    return best


def ram_bytes():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def run_round(args, data):
    warm(files_of(data))
    p0, l0 = pgpgin_kib(), load()
    r = bench_json(args)
    lo = r.get("loader", {})
    return {"au": r["au"], "cpu_s_per_1000_samples": r["cpu_s_per_1000_samples"],
            "engine": r.get("engine"), "verdict": r.get("verdict"),
            "samples_per_s": r.get("samples_per_s"), "disk_read_kib": pgpgin_kib() - p0,
            "load_before": l0, "load_after": load(), "mem_peak": lo.get("mem_peak"),
            "mem_cap": lo.get("mem_cap")}


def numpy_unet3d(d, files):
    """Write unet3d's files as DLIO's npz generator does, with NumPy itself:
    np.savez(path, x=records, y=labels), records uint8 of shape (d1, d2, 1)
    whose size is drawn from normal(146600628, 68341808). Returns False
    where NumPy is missing (the caller falls back to stoker gen)."""
    try:
        import numpy as np
    except ImportError:
        return False
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(10)
    for i in range(files):
        side = int(math.sqrt(max(rng.normal(UNET3D_BYTES, UNET3D_STDEV), 1 << 20)))
        x = rng.integers(0, 255, size=(side, side, 1), dtype=np.uint8)
        np.savez(os.path.join(d, f"img_{i + 1}_of_{files}.npz"), x=x, y=[0])
    return True


def d1(work, rounds):
    ceil_bps = copy_ceiling()
    demand = UNET3D_BATCH * UNET3D_BYTES / UNET3D_COMPUTE
    n = n_ceiling = max(1, math.floor(0.9 * ceil_bps / demand))
    files = max(2 * UNET3D_BATCH * n, 28)
    # The files must stay in the page cache with room to spare. The loader
    # maps them (its mmap engine allocates no batch buffers), so they may
    # take most of the RAM, but not all: with 0.8 of it in these files, the
    # kernel's reclaim ran beside the loader and AU at N = 8 fell from 0.99
    # to 0.65 (0 bytes read from the disk).
    fit = int(0.65 * ram_bytes() / UNET3D_BYTES)
    if files > fit:  # the page cache cannot hold enough files for 2 steps at that N
        n = max(1, fit // (2 * UNET3D_BATCH))
        files = 2 * UNET3D_BATCH * n
        print(f"D1  note: {fit} files fit in 0.65 of the RAM; N lowered from {n_ceiling} to {n} "
              f"({files} files, 2 steps per epoch)")
    d = os.path.join(work, f"d1-unet3d-numpy-{files}")
    generator = "numpy (DLIO's np.savez layout)"
    if len(files_of(d, ".npz")) != files and not numpy_unet3d(d, files):
        d = os.path.join(work, f"d1-unet3d-{files}")
        generator = "stoker gen (no NumPy here)"
    base = ["--workload", "unet3d", "--accel", "h100", "--data", d, "--files", str(files),
            "--samples-per-file", "1"]
    if not os.path.isdir(d) or len(files_of(d, ".npz")) != files:
        sh([STK, "bench", "-q", *base, "--accelerators", "1", "--epochs", "1"])  # generate once
    rows = [run_round([*base, "--accelerators", str(n)], d) for _ in range(rounds)]
    au = statistics.median(r["au"] for r in rows)
    cpu = statistics.median(r["cpu_s_per_1000_samples"] for r in rows)
    res = {"generator": generator, "copy_ceiling_bytes_per_s": ceil_bps, "target_n_from_ceiling": n_ceiling,
           "demand_bytes_per_s_per_accel": demand, "accelerators": n, "files": files,
           "au": au, "cpu_s_per_1000_samples": cpu, "rounds": rows, "pass": au >= 0.90}
    print(f"D1  unet3d/h100, page cache, {files} npz files written by {generator}: 2-thread copy ceiling "
          f"{ceil_bps / 2**30:.2f} GiB/s -> N = {n} (demand {demand / 2**30:.2f} GiB/s each); "
          f"AU {au:.3f} (median of {rounds}) [AU >= 0.90: {'pass' if au >= 0.90 else 'FAIL'}]; "
          f"{cpu:.2f} CPU-s per 1000 samples; load {rows[-1]['load_before']:.1f}; "
          f"disk reads {rows[-1]['disk_read_kib']} KiB")
    return res


def d2(work, rounds):
    d = os.path.join(work, "d2-resnet50-npz")
    if len(files_of(d, ".npz")) != RESNET_FILES:
        sh([STK, "gen", d, "--format", "npz", "--samples", str(RESNET_FILES), "--size",
            str(RESNET_BYTES), "--force", "-q"])
    cfg = os.path.join(work, "resnet50_h100_npz.yaml")
    with open(cfg, "w") as f:  # DLIO's resnet50_h100.yaml with DLIO's npz layout
        f.write("model:\n  name: resnet50\n  type: cnn\nframework: pytorch\n"
                "workflow:\n  generate_data: False\n  train: True\n"
                f"dataset:\n  num_files_train: {RESNET_FILES}\n  num_samples_per_file: 1\n"
                f"  record_length_bytes: {RESNET_BYTES}\n  data_folder: {d}\n  format: npz\n"
                f"train:\n  computation_time: {RESNET_COMPUTE}\n  epochs: 5\n"
                f"reader:\n  data_loader: pytorch\n  read_threads: {NCORES}\n"
                f"  batch_size: {RESNET_BATCH}\nmetric:\n  au: 0.90\n")
    base = ["--config", cfg, "--data", d, "--read-threads", str(NCORES)]
    maxn, cpu, rows = [], [], []
    for _ in range(rounds):
        r = run_round([*base, "--accelerators", "2"], d)
        cpu.append(r["cpu_s_per_1000_samples"])
        warm(files_of(d))
        p0, l0 = pgpgin_kib(), load()
        out = sh([STK, "bench", "-q", *base, "--find-max"])
        m = re.search(r"largest accelerator count meeting AU >= [0-9.]+: (\d+)", out)
        maxn.append(int(m.group(1)) if m else 0)
        r.update({"find_max": maxn[-1], "find_max_disk_read_kib": pgpgin_kib() - p0,
                  "find_max_load_before": l0})
        rows.append(r)
        print(out.rstrip())
    res = {"max_accelerators": statistics.median(maxn), "cpu_s_per_1000_samples": statistics.median(cpu),
           "rounds": rows, "files": RESNET_FILES, "pass": statistics.median(maxn) >= 10}
    print(f"D2  resnet50/h100 on DLIO's npz layout ({RESNET_FILES} files): largest N at AU >= 0.90: "
          f"{res['max_accelerators']:.0f} (rounds {maxn}) [>= 10: "
          f"{'pass' if res['pass'] else 'FAIL'}]; {res['cpu_s_per_1000_samples']:.3f} CPU-s per "
          f"1000 samples; load {rows[-1]['find_max_load_before']:.1f}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", default=os.environ.get("STOKER_BENCH_DIR", "/var/tmp/stoker-bench"))
    ap.add_argument("--only", default="D1,D2")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    want = set(a.only.upper().split(","))
    res = {"machine": {"cores": NCORES, "ram_bytes": ram_bytes()},
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if "D1" in want:
        res["D1"] = d1(a.work, a.rounds)
    if "D2" in want:
        res["D2"] = d2(a.work, a.rounds)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "dlio.json"), "w") as f:
        json.dump(res, f, indent=2)
    print("wrote bench/results/dlio.json")


if __name__ == "__main__":
    sys.exit(main())
