#!/usr/bin/python3
"""E3: `stoker gen` write rate against the device's sequential write ceiling,
both measured in the same run, in the same directory, for the same bytes.

Per round: the ceiling is `stoker doctor --only buffered_write,seq_write`
(1 MiB buffered writes with writeback started every 32 MiB, then
fdatasync; and 4 MiB O_DIRECT writes at QD 16, then fdatasync; the higher
of the two is the ceiling). gen is timed from start
until every file it wrote has been fsync'ed, so both sides include getting
the bytes onto the device, not just into the page cache. (gen itself
fdatasyncs each shard before renaming it into place and fsyncs the
directory, so the harness's own fsync of the tree finds nothing left to
write; it stays, so that a gen that did not sync would still be timed to
the device.) Everything dirty
is synced before each timed step so neither pays for the other's
writeback. Rounds alternate which side goes first. The table shows each
round and the medians; the JSON goes to bench/results/gen_write.json.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STK = os.path.join(ROOT, "build", "stoker")
MiB = 1024.0 * 1024.0


def ceiling(work, total):
    js = os.path.join(work, "ceil.json")
    os.sync()
    subprocess.run([STK, "doctor", "--only", "buffered_write,seq_write", "--dir", work,
                    "--size", str(total), "--json", js], check=True, stdout=subprocess.DEVNULL)
    with open(js) as f:
        d = json.load(f)
    figs = d["figures"]
    os.unlink(js)
    buf, dio = figs["buffered_write"]["value"], figs["seq_write"]["value"]
    return {"fs_type": d["fs_type"], "buffered_bps": buf, "direct_bps": dio,
            "direct_note": figs["seq_write"].get("reason") or figs["seq_write"].get("method"),
            "ceiling_bps": max(v for v in (buf, dio) if v is not None)}


def fsync_tree(path):
    for dirpath, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def gen(work, samples, size):
    out = os.path.join(work, "ds")
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    t0 = time.monotonic()
    p = subprocess.run([STK, "gen", out, "--format", "tfrecord", "--samples", str(samples),
                        "--size", size], check=True, capture_output=True, text=True)
    t1 = time.monotonic()
    fsync_tree(out)
    t2 = time.monotonic()
    nbytes = tree_bytes(out)
    m = re.search(r" in ([0-9.]+) s, ", p.stdout)
    shutil.rmtree(out)
    return {"bytes": nbytes, "seconds": t2 - t0, "gen_seconds": t1 - t0,
            "fsync_seconds": t2 - t1, "gen_internal_seconds": float(m.group(1)) if m else None,
            "bps": nbytes / (t2 - t0), "to_cache_bps": nbytes / (t1 - t0)}


def fmt(bps):
    return "%.2f GiB/s" % (bps / MiB / 1024) if bps >= 1024 * MiB else "%.0f MiB/s" % (bps / MiB)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--total", default="2GiB", help="bytes per timed write (both sides)")
    ap.add_argument("--record", default="128KiB")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR") or "/var/tmp",
                    help="directory on the storage under test")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "gen_write.json"))
    a = ap.parse_args()

    units = {"KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
    def parse(s):
        for u, m in units.items():
            if s.endswith(u):
                return int(float(s[:-len(u)]) * m)
        return int(s)
    total, record = parse(a.total), parse(a.record)
    samples = max(1, total // record)

    work = tempfile.mkdtemp(prefix="stoker-gen-write.", dir=a.dir)
    rounds = []
    try:
        for r in range(a.rounds):
            if r % 2 == 0:
                c = ceiling(work, total)
                g = gen(work, samples, a.record)
            else:
                g = gen(work, samples, a.record)
                c = ceiling(work, total)
            rounds.append({"round": r + 1, "ceiling": c, "gen": g, "ratio": g["bps"] / c["ceiling_bps"]})
    finally:
        shutil.rmtree(work, ignore_errors=True)

    fs = rounds[0]["ceiling"]["fs_type"]
    print("E3: stoker gen write rate vs the device's sequential write ceiling")
    print("  %s (%s), %d x %s tfrecord records = %.2f GiB per timed write, %d rounds"
          % (a.dir, fs, samples, a.record, samples * record / MiB / 1024, a.rounds))
    print("  %-6s %14s %14s %14s %14s %8s" % ("round", "O_DIRECT+sync", "buffered+wb",
                                              "gen+fsync", "gen to cache", "ratio"))
    for x in rounds:
        c, g = x["ceiling"], x["gen"]
        print("  %-6d %14s %14s %14s %14s %8.3f" % (
            x["round"], fmt(c["direct_bps"]) if c["direct_bps"] else "-", fmt(c["buffered_bps"]),
            fmt(g["bps"]), fmt(g["to_cache_bps"]), x["ratio"]))
    med = lambda f: statistics.median(f(x) for x in rounds)
    mc, mg, mr = med(lambda x: x["ceiling"]["ceiling_bps"]), med(lambda x: x["gen"]["bps"]), med(lambda x: x["ratio"])
    print("  median ceiling %s, gen %s, ratio %.3f (target >= 0.8): %s"
          % (fmt(mc), fmt(mg), mr, "PASS" if mr >= 0.8 else "BELOW"))

    res = {"bench": "gen_write", "experiment": "E3", "dir": a.dir, "fs_type": fs,
           "record_bytes": record, "samples": samples, "bytes_per_write": samples * record,
           "method": "ceiling = max(doctor buffered_write (1 MiB writes, writeback started every "
                     "32 MiB), seq_write (O_DIRECT 4 MiB x 16)), each timed through fdatasync; "
                     "gen timed until every file it wrote was fsync'ed; os.sync() before each side",
           "rounds": rounds, "median_ceiling_bps": mc, "median_gen_bps": mg,
           "median_ratio": mr, "target": 0.8, "pass": mr >= 0.8}
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
