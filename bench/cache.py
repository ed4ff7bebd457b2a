#!/usr/bin/python3
"""Shard cache benchmarks C1-C4. Every figure is a median of several rounds,
and every ratio is taken within one round against a ceiling measured in that
round. Page-cache figures are taken right after warming the files, with the
disk reads (pgpgin from /proc/vmstat) recorded beside them; fills record the
disk writes (pgpgout) too.

C1 warm cache: `stoker feed` served from the disk tier, against 2 threads of
   1 MiB sequential reads of the same cached files (bench/seqread, 64 MiB
   destination per thread, as B1). Target >= 0.9. `fetches` must be 0.
   Reported with and without the CRC check, and beside the same feed of the
   origin's files without a cache (is any gap the cache's or the loader's?).
C2 cold cache from loopback nginx: `stoker cache warm URL` into an empty
   cache with P fetchers, against curl downloading the same shards with P
   parallel transfers into the same file system. Compared twice: without
   fsync (--cache-no-fsync against curl) and with it (stoker's default
   against curl followed by sync). The cold `stoker feed URL` (fsync, reads
   every sample too) is compared with curl + sync. Target >= 0.8.
C3 jitter: the largest accelerator count N meeting AU >= 0.90 on local data
   (`stoker bench --find-max`), then the same N with the data behind a proxy
   adding 20 +- 15 ms to every request (a fresh RAM tier each run, so epoch 1
   fetches every shard through it), with look-ahead on (default) and off.
   Target: AU >= 0.90 at the local N with look-ahead on. For context: the
   same N through a proxy that adds no latency (bandwidth, not latency, is
   then what limits), curl through the jittery proxy (the bytes/s the origin
   path offers), and the largest N the jittery remote meets, with look-ahead
   on and off at that N.
C4 eight `stoker feed` processes sharing one cold disk cache behind nginx
   (through the proxy, whose byte counter gives the origin's body bytes):
   every shard fetched once, bytes from the origin = dataset bytes (plus one
   manifest per process).

usage: cache.py [--rounds N] [--work DIR] [--only C1,C2,C3,C4] [--parallel 8,4]
Writes bench/results/cache.json. Servers come from tests/tools/serve, started
in the work dir and always stopped before exit."""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

from benchlib import BENCH, NCORES, ROOT, STK, files_of, pgpgin_kib, pgpgout_kib, warm

SERVE = os.path.join(ROOT, "tests", "tools", "serve")
SEQREAD = os.path.join(BENCH, "seqread")
MIB = 1 << 20

# The dataset of C1, C2 and C4: 2 GiB of 128 KiB TFRecord records in 32
# shards of 64 MiB, with its manifest.
DS_SAMPLES, DS_RECORD, DS_PER_SHARD = 16384, 131072, 512

# C3's workload: 64 shards of 256 records of 64 KiB (16 MiB shards, 1 GiB),
# batch 64, 20 ms of compute, 2 epochs. The loader's BLOCK shuffle window
# (4096 samples, the default for remote data) then spans 16 of the 64 shards,
# so the reader walks through the dataset and the look-ahead has somewhere to
# go; a dataset of 4096 samples or fewer would put every shard in the first
# window. Small enough that --find-max (which starts at N = 1) takes ~20 s.
C3_WORK = ["--files", "64", "--samples-per-file", "256", "--record-size", "65536", "--batch", "64",
           "--epochs", "2", "--compute-s", "0.02"]
C3_LATENCY_MS, C3_JITTER_MS = 20, 15
C4_PROCS = 8


class Skip(Exception):
    """A benchmark that cannot run here; the message says why."""


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def run(cmd, timeout=600, check=True, **kw):
    """Run cmd; on failure raise with the command and its stderr's tail."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        tail = (r.stderr or r.stdout).strip()[-800:]
        raise RuntimeError(f"{' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''} exited {r.returncode}: {tail}")
    return r


def timed(cmd, **kw):
    t0 = time.monotonic()
    r = run(cmd, **kw)
    return time.monotonic() - t0, r


def fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    if os.path.exists(d):
        raise RuntimeError(f"cannot remove {d}")


def http_json(url, method="GET"):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
    return json.loads(body) if body.strip() else {}


def cache_stats(cdir):
    return json.loads(run([STK, "cache", "stats", "--cache-dir", cdir, "--json"]).stdout)


def cached_files(cdir):
    return [f for f in files_of(os.path.join(cdir, "data")) if not f.endswith(".meta")]


class Servers:
    """Servers started with tests/tools/serve from the work dir (their state
    is in WORK/.servers); stop() stops every one of them."""

    def __init__(self, work):
        self.work = work
        self.used = False

    def start(self, *args):
        self.used = True  # even a failed start may have left one behind
        try:
            r = subprocess.run([SERVE, *args], cwd=self.work, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Skip(f"serve {args[0]} did not start: {e}")
        if r.returncode != 0 or not r.stdout.strip():
            raise Skip(f"serve {args[0]} failed: {' '.join(r.stderr.strip().split())[-400:]}")
        return r.stdout.split()[0]

    def stop(self):
        if self.used:
            subprocess.run([SERVE, "stop"], cwd=self.work, capture_output=True, text=True, timeout=60)
            self.used = False

    def nginx_log(self, url):
        return os.path.join(self.work, ".servers", "nginx-" + url.rsplit(":", 1)[1].strip("/"), "access.log")


LOG_RE = re.compile(r'"(GET|HEAD) /([^ ]*) HTTP/[0-9.]+" (\d+) (\d+)')


def nginx_requests(path, offset):
    """Requests logged by nginx past byte offset: {(method, path): [count, body bytes]}."""
    out = {}
    with open(path) as f:
        f.seek(offset)
        for line in f:
            m = LOG_RE.search(line)
            if m:
                e = out.setdefault((m.group(1), m.group(2)), [0, 0])
                e[0] += 1
                e[1] += int(m.group(4))
    return out


def dataset(work):
    """The 2 GiB TFRecord dataset with its manifest, generated once."""
    d = os.path.join(work, "ds-tfrecord-128k-2g")
    mark = os.path.join(d, ".bench-complete")
    if not os.path.exists(mark):
        print(f"generating {d} (once) ...", flush=True)
        run([STK, "gen", d, "--force", "--seed", "1", "--format", "tfrecord", "--samples", str(DS_SAMPLES),
             "--size", str(DS_RECORD), "--samples-per-shard", str(DS_PER_SHARD), "-q"])
        run([STK, "cache", "manifest", d])
        open(mark, "w").close()
    shards = files_of(d, ".tfrecord")
    return d, shards, sum(os.path.getsize(f) for f in shards)


# ---- C1 ----------------------------------------------------------------------------


def c1(work, ds, shards, total, rounds):
    cdir = os.path.join(work, "c1-cache")
    n = len(shards)
    st = cache_stats(cdir) if os.path.exists(os.path.join(cdir, "STOKER-CACHE")) else None
    if not st or st.get("entry_count") != n or st.get("bytes") != total:
        fresh(cdir)
        run([STK, "cache", "warm", ds, "--cache-dir", cdir, "-q"])
    files = cached_files(cdir)
    if len(files) != n or sum(os.path.getsize(f) for f in files) != total:
        raise RuntimeError(f"{cdir}/data holds {len(files)} files, expected {n} shards of {total} bytes")
    epochs = 3
    per_sample = total / DS_SAMPLES  # file bytes per record (payload + framing)
    base = [STK, "feed", ds, "--cache-dir", cdir, "--threads", "2", "--batch", "64", "--json", "-q"]
    warm(files)
    # Untimed: a first use re-hashes entries whose verification stamp is stale
    # (after a reboot), and restamps them.
    run(base + ["--epochs", "1"])
    rows = []
    for _ in range(rounds):
        warm(files)
        p0 = pgpgin_kib()
        ceil = json.loads(run([SEQREAD, "2", "1MiB", "64MiB", *(files * epochs)]).stdout)
        nv = json.loads(run(base + ["--epochs", str(epochs), "--no-verify"]).stdout)
        # in shard order: the loader coalesces a shard's records into large
        # reads, as the ceiling's 1 MiB sequential reads are
        sq = json.loads(run(base + ["--epochs", str(epochs), "--no-verify", "--shuffle", "none"]).stdout)
        v = json.loads(run(base + ["--epochs", str(epochs)]).stdout)
        warm(shards)
        # reference: the loader on the origin's own files, no cache, with the
        # BLOCK shuffle a cached dataset defaults to (local TFRecords with
        # .idx default to GLOBAL)
        loc = json.loads(run([STK, "feed", ds, "--threads", "2", "--batch", "64", "--json", "-q", "--epochs",
                              str(epochs), "--no-verify", "--shuffle", "block"]).stdout)
        disk = pgpgin_kib() - p0
        nv_bps = nv["stats"]["samples_per_s"] * per_sample
        sq_bps = sq["stats"]["samples_per_s"] * per_sample
        v_bps = v["stats"]["samples_per_s"] * per_sample
        loc_bps = loc["stats"]["samples_per_s"] * per_sample
        rows.append({"ceiling_bytes_per_s": ceil["bytes_per_s"], "stoker_noverify_bytes_per_s": nv_bps,
                     "stoker_inorder_noverify_bytes_per_s": sq_bps, "ratio_inorder_noverify": sq_bps / ceil["bytes_per_s"],
                     "stoker_uncached_noverify_bytes_per_s": loc_bps, "ratio_uncached_noverify": loc_bps / ceil["bytes_per_s"],
                     "cached_vs_uncached": nv_bps / loc_bps,
                     "stoker_verify_bytes_per_s": v_bps, "ratio_noverify": nv_bps / ceil["bytes_per_s"],
                     "ratio_verify": v_bps / ceil["bytes_per_s"], "disk_read_kib": disk,
                     "fetches_noverify": nv["stats"]["cache"]["fetches"], "fetches_verify": v["stats"]["cache"]["fetches"],
                     "disk_hits_noverify": nv["stats"]["cache"]["disk"]["hits"],
                     "disk_misses_noverify": nv["stats"]["cache"]["disk"]["misses"],
                     "origin_requests_noverify": nv["stats"]["cache"]["requests"],
                     "origin_fetch_bytes_noverify": nv["stats"]["cache"]["fetch_bytes"],
                     "engine": nv["engine"]})
    num = [k for k in rows[0] if k != "engine"]
    res = {k: median([r[k] for r in rows]) for k in num}
    res.update(engine=rows[0]["engine"], rounds=rows, target=0.9, shards=n, dataset_bytes=total, epochs=epochs,
               fetches_max=max(max(r["fetches_noverify"], r["fetches_verify"]) for r in rows),
               dataset=f"{DS_SAMPLES} TFRecord records of 128 KiB in {n} shards of 64 MiB, staged once into {cdir}; "
                       f"{epochs} epochs per run; stoker feed --threads 2 --batch 64; bytes/s = samples/s x file "
                       f"bytes per record (131088), as seqread counts file bytes; reference: the same feed of {ds} "
                       f"itself, no cache, --shuffle block (the cached runs' default)")
    # The ceiling reads each file sequentially; the like-for-like figure is
    # the loader reading in shard order. The shuffled figure is printed too.
    res["pass"] = res["ratio_inorder_noverify"] >= 0.9 and res["fetches_max"] == 0
    print(f"C1  warm disk tier, 2 threads, {epochs} epochs of {total / 2**30:.2f} GiB: stoker feed --no-verify "
          f"{res['stoker_noverify_bytes_per_s'] / MIB:.0f} MiB/s, CRC checked {res['stoker_verify_bytes_per_s'] / MIB:.0f} "
          f"MiB/s; ceiling (seqread 2 x 1 MiB into 64 MiB) {res['ceiling_bytes_per_s'] / MIB:.0f} MiB/s: ratio "
          f"{res['ratio_noverify']:.2f} with the BLOCK shuffle (random 128 KiB reads), {res['ratio_inorder_noverify']:.2f} "
          f"in shard order (--shuffle none) (CRC checked {res['ratio_verify']:.2f}; the same feed on the origin's files "
          f"without a cache {res['ratio_uncached_noverify']:.2f}); origin fetches "
          f"{res['fetches_max']} (disk hits {res['disk_hits_noverify']:.0f}/{n}); disk reads {res['disk_read_kib']:.0f} KiB  "
          f"[in shard order >= 0.9: {'pass' if res['pass'] else 'FAIL'}]")
    return res


# ---- C2 ----------------------------------------------------------------------------


def c2(work, shards, total, url, rounds, plist):
    names = [os.path.basename(f) for f in shards]
    sizes = {os.path.basename(f): os.path.getsize(f) for f in shards}
    scratch = os.path.join(work, "c2-curl")
    cdir = os.path.join(work, "c2-cache")

    def prepare(d):
        fresh(d)
        os.sync()  # no dirty pages of the previous run left to write back
        warm(shards)  # nginx reads the page cache on both sides

    def measure(cmd, do_sync=False):
        p0, o0, c0 = pgpgin_kib(), pgpgout_kib(), children_cpu()
        t0 = time.monotonic()
        r = run(cmd)
        if do_sync:
            os.sync()
        dt = time.monotonic() - t0
        cpu.append(children_cpu() - c0)
        return dt, r, pgpgin_kib() - p0, pgpgout_kib() - o0

    cpu = []

    def curl(P, do_sync):
        prepare(scratch)
        os.makedirs(scratch)
        cmd = ["curl", "-sS", "--fail", "--no-progress-meter", "--parallel", "--parallel-immediate",
               "--parallel-max", str(P)]
        for n in names:
            cmd += ["-o", os.path.join(scratch, n), f"{url}/{n}"]
        dt, _, din, dout = measure(cmd, do_sync)
        bad = [n for n in names if os.path.getsize(os.path.join(scratch, n)) != sizes[n]]
        if bad:
            raise RuntimeError(f"curl left {len(bad)} short files ({bad[0]} ...)")
        return {"s": dt, "bytes_per_s": total / dt, "disk_read_kib": din, "disk_write_kib": dout, "cpu_s": cpu[-1]}

    def check_cache():
        st = cache_stats(cdir)
        if st["entry_count"] != len(names) or st["bytes"] != total:
            raise RuntimeError(f"{cdir} holds {st['entry_count']} entries of {st['bytes']} bytes after the fill; "
                               f"expected {len(names)} of {total}")
        return st

    def stoker_warm(P, fsync):
        prepare(cdir)
        cmd = [STK, "cache", "warm", url, "--cache-dir", cdir, "--fetchers", str(P), "-q"]
        dt, _, din, dout = measure(cmd + ([] if fsync else ["--cache-no-fsync"]))
        st = check_cache()
        return {"s": dt, "bytes_per_s": total / dt, "disk_read_kib": din, "disk_write_kib": dout, "cpu_s": cpu[-1],
                "fetches": st["counters"]["fetches"], "requests": st["counters"]["requests"]}

    def stoker_feed(P):
        prepare(cdir)
        cmd = [STK, "feed", url, "--cache-dir", cdir, "--fetchers", str(P), "--no-verify", "--json", "-q"]
        dt, r, din, dout = measure(cmd)
        rep = json.loads(r.stdout)
        check_cache()
        return {"s": dt, "bytes_per_s": total / dt, "disk_read_kib": din, "disk_write_kib": dout, "cpu_s": cpu[-1],
                "feed_wall_s": rep["stats"]["wall_s"], "fetches": rep["stats"]["cache"]["fetches"],
                "stalls": rep["stats"]["cache"]["stalls"], "stall_s": rep["stats"]["cache"]["stall_s"]}

    res = {"url": url, "shards": len(names), "dataset_bytes": total, "target": 0.8,
           "method": "wall time of each command from start to exit (curl + sync: until sync returns); "
                     "MiB/s = dataset bytes / that time; before each run: the destination removed, sync, "
                     "origin files read into the page cache; after an unsynced run, an untimed sync",
           "curl": "curl -sS --fail --parallel --parallel-immediate --parallel-max P -o FILE URL ... "
                   "(HTTP/1.1, P connections)"}
    try:
        for P in plist:
            rows = []
            for _ in range(rounds):
                row = {"curl": curl(P, False)}
                os.sync()
                row["stoker_warm_nofsync"] = stoker_warm(P, False)
                os.sync()
                row["curl_sync"] = curl(P, True)
                row["stoker_warm_fsync"] = stoker_warm(P, True)
                if P == plist[0]:
                    row["stoker_feed_fsync"] = stoker_feed(P)
                row["ratio_nofsync"] = row["stoker_warm_nofsync"]["bytes_per_s"] / row["curl"]["bytes_per_s"]
                row["ratio_fsync"] = row["stoker_warm_fsync"]["bytes_per_s"] / row["curl_sync"]["bytes_per_s"]
                if "stoker_feed_fsync" in row:
                    row["ratio_feed_fsync"] = row["stoker_feed_fsync"]["bytes_per_s"] / row["curl_sync"]["bytes_per_s"]
                rows.append(row)
            r = {"rounds": rows}
            for k in ("curl", "stoker_warm_nofsync", "curl_sync", "stoker_warm_fsync", "stoker_feed_fsync"):
                if k in rows[0]:
                    r[k + "_bytes_per_s"] = median([x[k]["bytes_per_s"] for x in rows])
                    r[k + "_disk_read_kib"] = median([x[k]["disk_read_kib"] for x in rows])
                    r[k + "_disk_write_kib"] = median([x[k]["disk_write_kib"] for x in rows])
                    r[k + "_cpu_s"] = median([x[k]["cpu_s"] for x in rows])
            for k in ("ratio_nofsync", "ratio_fsync", "ratio_feed_fsync"):
                if k in rows[0]:
                    r[k] = median([x[k] for x in rows])
            r["pass"] = r["ratio_nofsync"] >= 0.8 and r["ratio_fsync"] >= 0.8
            res[f"P{P}"] = r
            print(f"C2  cold cache from loopback nginx, P={P}, {total / 2**30:.2f} GiB in {len(names)} shards:")
            print(f"      no fsync:  stoker cache warm --cache-no-fsync {r['stoker_warm_nofsync_bytes_per_s'] / MIB:.0f} MiB/s"
                  f" vs curl {r['curl_bytes_per_s'] / MIB:.0f} MiB/s: ratio {r['ratio_nofsync']:.2f}")
            print(f"      fsync:     stoker cache warm {r['stoker_warm_fsync_bytes_per_s'] / MIB:.0f} MiB/s vs curl + sync "
                  f"{r['curl_sync_bytes_per_s'] / MIB:.0f} MiB/s: ratio {r['ratio_fsync']:.2f}")
            if "ratio_feed_fsync" in r:
                print(f"      cold feed: stoker feed URL --no-verify {r['stoker_feed_fsync_bytes_per_s'] / MIB:.0f} MiB/s "
                      f"(fsync, every sample read too) vs curl + sync: ratio {r['ratio_feed_fsync']:.2f}")
            print(f"      disk reads (median KiB): curl {r['curl_disk_read_kib']:.0f}, stoker {r['stoker_warm_nofsync_disk_read_kib']:.0f}"
                  f" / {r['stoker_warm_fsync_disk_read_kib']:.0f}; writes: curl+sync {r['curl_sync_disk_write_kib'] / 1024:.0f} MiB, "
                  f"stoker fsync {r['stoker_warm_fsync_disk_write_kib'] / 1024:.0f} MiB; CPU s (user+sys): curl "
                  f"{r['curl_cpu_s']:.2f}, stoker --cache-no-fsync {r['stoker_warm_nofsync_cpu_s']:.2f}  "
                  f"[both ratios >= 0.8: {'pass' if r['pass'] else 'FAIL'}]")
    finally:
        fresh(scratch)
        fresh(cdir)
    return res


# ---- C3 ----------------------------------------------------------------------------


def bench_run(work, data, n, extra=()):
    out = os.path.join(work, "c3-bench.json")
    if os.path.exists(out):
        os.unlink(out)
    run([STK, "bench", "--data", data, *C3_WORK, "--accelerators", str(n), "-q", "--json", out, *extra], check=False)
    if not os.path.exists(out):
        raise RuntimeError(f"stoker bench --data {data} --accelerators {n} {' '.join(extra)} wrote no report")
    with open(out) as f:
        r = json.load(f)
    c = r["loader"].get("cache") or {}
    ep_au = []
    for ep in r.get("epochs", []):
        aus = [a["au"] for a in ep["accelerators"] if a.get("au") is not None]
        ep_au.append(statistics.mean(aus) if aus else None)
    return {"au": r["au"], "pass": r["pass"], "samples_per_s": r["samples_per_s"], "wall_s": r["wall_s"],
            "au_per_epoch": ep_au, "verdict": r["verdict"], "fetches": c.get("fetches"),
            "fetch_bytes": c.get("fetch_bytes"), "requests": c.get("requests"), "retries": c.get("retries"),
            "fetch_ms": c.get("fetch_ms"), "prefetched": c.get("prefetched"), "stalls": c.get("stalls"),
            "stall_s": c.get("stall_s"), "ram_hits": (c.get("ram") or {}).get("hits"),
            "ram_misses": (c.get("ram") or {}).get("misses")}


def find_max(data, extra=()):
    r = run([STK, "bench", "--data", data, *C3_WORK, "--find-max", "-q", *extra], check=False)
    m = re.search(r"largest accelerator count meeting AU >= [0-9.]+: (\d+)", r.stdout)
    trials = re.findall(r"^\s+(\d+)\s+([0-9.]+)\s+(pass|fail)", r.stdout, re.M)
    if not m and "no accelerator count meets" not in r.stdout:
        raise RuntimeError(f"stoker bench --find-max on {data} failed: {(r.stderr or r.stdout).strip()[-600:]}")
    return (int(m.group(1)) if m else 0), [{"n": int(a), "au": float(b), "pass": c == "pass"} for a, b, c in trials]


def fmt_trials(trials):
    return ", ".join("%d:%.3f" % (t["n"], t["au"]) for t in trials)


def curl_ceiling(url, names, P):
    """Seconds for curl to GET every shard with P parallel transfers, bodies
    discarded: the bandwidth the origin path (nginx, proxy) offers."""
    cmd = ["curl", "-sS", "--fail", "--no-progress-meter", "--parallel", "--parallel-immediate",
           "--parallel-max", str(P)]
    for n in names:
        cmd += ["-o", "/dev/null", f"{url}/{n}"]
    return timed(cmd)[0]


def c3(work, servers, rounds):
    d = os.path.join(work, "c3-bench-64x256x64k")
    mark = os.path.join(d, ".bench-complete")
    if not os.path.exists(mark):
        print(f"generating {d} (once) ...", flush=True)
        fresh(d)
        # a run at a high count generates the data fast (few, short steps)
        run([STK, "bench", "--data", d, *C3_WORK, "--accelerators", "16", "--epochs", "1", "-q"])
        run([STK, "cache", "manifest", d])
        open(mark, "w").close()
    files = [f for f in files_of(d) if f.endswith(".tfrecord")]
    names = [os.path.basename(f) for f in files]
    total = sum(os.path.getsize(f) for f in files)
    w = dict(zip(C3_WORK[::2], C3_WORK[1::2]))
    per_acc = int(w["--batch"]) * int(w["--record-size"]) / float(w["--compute-s"])  # bytes/s one accelerator eats
    res = {"workload": " ".join(C3_WORK), "data": d, "shards": len(files), "dataset_bytes": total, "target_au": 0.9,
           "bytes_per_s_per_accelerator": per_acc,
           "proxy": f"--latency-ms {C3_LATENCY_MS} --jitter-ms {C3_JITTER_MS} --seed 1",
           "remote": "--data PROXY_URL --ram-cache-size 2GiB (a fresh RAM tier every run: epoch 1 fetches every "
                     "shard through the proxy, epoch 2 reads the RAM tier); shuffle: the loader's default, BLOCK "
                     "with a 4096-sample window for remote data (16 of the 64 shards), GLOBAL for local data "
                     "(TFRecord with .idx)",
           "control": "remote_nolatency: the same runs through a second proxy that adds no latency, which "
                      "separates latency (what look-ahead hides) from bandwidth; curl_ceiling: curl GETs every "
                      "shard through the jittery proxy with 8 parallel transfers to /dev/null"}
    origin = servers.start("nginx", d)
    proxy = servers.start("proxy", origin, "--latency-ms", str(C3_LATENCY_MS), "--jitter-ms", str(C3_JITTER_MS),
                          "--seed", "1")
    plain = servers.start("proxy", origin)
    warm(files)
    p0 = pgpgin_kib()
    n, trials = find_max(d)
    res["local_find_max"] = {"n": n, "trials": trials, "disk_read_kib": pgpgin_kib() - p0}
    print(f"C3  local data (page cache): largest N at AU >= 0.90: {n}  (trials: {fmt_trials(trials)}; "
          f"disk reads {pgpgin_kib() - p0} KiB)", flush=True)
    if n == 0:
        raise RuntimeError("no accelerator count meets AU >= 0.90 on local data; nothing to compare")
    res["n"] = n
    remote = ["--ram-cache-size", "2GiB"]
    off = ["--cache-prefetch", "off"]
    warm(files)
    t0 = time.monotonic()
    rn, rtrials = find_max(proxy, remote)
    res["remote_find_max"] = {"n": rn, "trials": rtrials, "s": time.monotonic() - t0}
    print(f"C3  remote behind the jittery proxy, look-ahead on: largest N at AU >= 0.90: {rn}  "
          f"(trials: {fmt_trials(rtrials)})", flush=True)
    res["n_remote"] = rn
    runs = [("local", d, n, []), ("remote_prefetch", proxy, n, remote), ("remote_noprefetch", proxy, n, remote + off),
            ("remote_nolatency_prefetch", plain, n, remote)]
    if rn:
        runs += [("remote_prefetch_at_nr", proxy, rn, remote), ("remote_noprefetch_at_nr", proxy, rn, remote + off)]
    rows = []
    for _ in range(rounds):
        row = {}
        p0 = pgpgin_kib()
        for key, data, count, extra in runs:
            warm(files)
            row[key] = bench_run(work, data, count, extra)
        warm(files)
        dt = curl_ceiling(proxy, names, 8)
        row["curl_ceiling_bytes_per_s"] = total / dt
        row["disk_read_kib"] = pgpgin_kib() - p0
        rows.append(row)
    res["rounds"] = rows
    if os.path.exists(os.path.join(work, "c3-bench.json")):
        os.unlink(os.path.join(work, "c3-bench.json"))
    for key, _, _, _ in runs:
        res[key + "_au"] = median([r[key]["au"] for r in rows])
        res[key + "_samples_per_s"] = median([r[key]["samples_per_s"] for r in rows])
        res[key + "_au_epoch1"] = median([r[key]["au_per_epoch"][0] for r in rows])
        res[key + "_au_epoch2"] = median([r[key]["au_per_epoch"][-1] for r in rows])
        res[key + "_fetches"] = median([r[key]["fetches"] for r in rows])
        res[key + "_stall_s"] = median([r[key]["stall_s"] for r in rows])
    res["curl_ceiling_bytes_per_s"] = median([r["curl_ceiling_bytes_per_s"] for r in rows])
    res["curl_ceiling_accelerators"] = res["curl_ceiling_bytes_per_s"] / per_acc
    res["disk_read_kib"] = median([r["disk_read_kib"] for r in rows])
    res["fetch_ms_p50"] = median([(r["remote_prefetch"]["fetch_ms"] or {}).get("p50") for r in rows])
    res["fetch_ms_p99"] = median([(r["remote_prefetch"]["fetch_ms"] or {}).get("p99") for r in rows])
    res["pass"] = res["remote_prefetch_au"] >= 0.9
    print(f"C3  {res['shards']} shards of {total / res['shards'] / MIB:.0f} MiB, {' '.join(C3_WORK)} "
          f"({per_acc / MIB:.0f} MiB/s per accelerator); proxy adds {C3_LATENCY_MS} +- {C3_JITTER_MS} ms a request "
          f"(look-ahead fetch p50 {res['fetch_ms_p50'] or 0:.0f} ms, p99 {res['fetch_ms_p99'] or 0:.0f} ms)")
    labels = {"local": "local data", "remote_prefetch": "jitter, look-ahead", "remote_noprefetch": "jitter, prefetch off",
              "remote_nolatency_prefetch": "no latency, look-ahead",
              "remote_prefetch_at_nr": "jitter, look-ahead", "remote_noprefetch_at_nr": "jitter, prefetch off"}
    for key, _, count, _ in runs:
        print(f"      N={count:<3d} {labels[key]:23s} AU {res[key + '_au']:.3f} (epoch 1 {res[key + '_au_epoch1']:.3f}, "
              f"epoch 2 {res[key + '_au_epoch2']:.3f}), {res[key + '_samples_per_s']:.0f} samples/s"
              + (f", waited for fetches {res[key + '_stall_s']:.2f} s" if res[key + "_stall_s"] is not None else ""))
    print(f"      curl through the jittery proxy, 8 transfers: {res['curl_ceiling_bytes_per_s'] / MIB:.0f} MiB/s, "
          f"enough for {res['curl_ceiling_accelerators']:.1f} accelerators; disk reads {res['disk_read_kib']:.0f} KiB  "
          f"[AU >= 0.90 at local N={n}: {'pass' if res['pass'] else 'FAIL'}]")
    return res


# ---- C4 ----------------------------------------------------------------------------


def c4(work, shards, total, origin, servers, rounds):
    names = {os.path.basename(f) for f in shards}
    manifest_bytes = os.path.getsize(os.path.join(os.path.dirname(shards[0]), "stoker-manifest.json"))
    proxy = servers.start("proxy", origin)
    log = servers.nginx_log(origin)
    cdir = os.path.join(work, "c4-cache")
    rows = []
    try:
        for _ in range(rounds):
            fresh(cdir)
            os.sync()
            warm(shards)
            http_json(proxy + "/__proxy/reset", "POST")
            off = os.path.getsize(log) if os.path.exists(log) else 0
            p0 = pgpgin_kib()
            t0 = time.monotonic()
            procs = []
            try:
                for _ in range(C4_PROCS):
                    procs.append(subprocess.Popen([STK, "feed", proxy, "--cache-dir", cdir, "--no-verify", "--json",
                                                   "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                outs = [p.communicate(timeout=600) for p in procs]
            finally:
                for p in procs:  # a timeout or an interrupt leaves none behind
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            wall = time.monotonic() - t0
            disk = pgpgin_kib() - p0
            for p, (o, e) in zip(procs, outs):
                if p.returncode != 0:
                    raise RuntimeError(f"a stoker feed of the {C4_PROCS} exited {p.returncode}: {e.strip()[-600:]}")
            reps = [json.loads(o) for o, _ in outs]
            px = http_json(proxy + "/__proxy/stats")
            cs = cache_stats(cdir)
            time.sleep(0.2)  # nginx writes its log line after the response
            reqs = nginx_requests(log, off)
            shard_gets = {p: v for (m, p), v in reqs.items() if m == "GET" and p in names}
            man_gets = reqs.get(("GET", "stoker-manifest.json"), [0, 0])
            man_heads = reqs.get(("HEAD", "stoker-manifest.json"), [0, 0])
            other = {f"{m} /{p}": v[0] for (m, p), v in reqs.items()
                     if not (p in names or p == "stoker-manifest.json")}
            c = cs["counters"]
            rows.append({
                "wall_s": wall, "disk_read_kib": disk,
                "proxy_body_bytes": px["bytes"], "proxy_forwarded": px["forwarded"],
                "proxy_shard_body_bytes": px["bytes"] - man_gets[1],
                "nginx_shard_gets": sum(v[0] for v in shard_gets.values()),
                "nginx_shard_bytes": sum(v[1] for v in shard_gets.values()),
                "nginx_shards_fetched_more_than_once": sorted(p for p, v in shard_gets.items() if v[0] > 1),
                "nginx_shards_never_fetched": sorted(names - set(shard_gets)),
                "nginx_manifest_gets": man_gets[0], "nginx_manifest_heads": man_heads[0], "nginx_other": other,
                "cache_fetches": c["fetches"], "cache_fetch_bytes": c["fetch_bytes"], "cache_requests": c["requests"],
                "cache_shared_waits": c["shared_waits"], "cache_entries": cs["entry_count"], "cache_bytes": cs["bytes"],
                "per_process_fetches": [r["stats"]["cache"]["fetches"] for r in reps],
                "per_process_samples": [r["stats"]["samples"] for r in reps]})
    finally:
        fresh(cdir)
    last = rows[-1]
    res = {"processes": C4_PROCS, "shards": len(names), "dataset_bytes": total, "manifest_bytes": manifest_bytes,
           "rounds": rows, "wall_s": median([r["wall_s"] for r in rows]),
           "disk_read_kib": median([r["disk_read_kib"] for r in rows]),
           "note": "each process GETs the manifest once (and HEADs it once): origin body bytes = dataset bytes "
                   "+ processes x manifest bytes"}
    res["pass"] = all(r["cache_fetches"] == len(names) and r["nginx_shard_gets"] == len(names)
                      and r["proxy_shard_body_bytes"] == total and not r["nginx_shards_never_fetched"]
                      and r["cache_entries"] == len(names) and all(s == DS_SAMPLES for s in r["per_process_samples"])
                      for r in rows)
    print(f"C4  {C4_PROCS} stoker feed processes, one cold cache, nginx via proxy ({len(rows)} rounds, "
          f"{res['wall_s']:.1f} s each): dataset {total} B in {len(names)} shards; origin body bytes "
          f"{last['proxy_body_bytes']} = shards {last['proxy_shard_body_bytes']} + {last['nginx_manifest_gets']} "
          f"manifests x {manifest_bytes}; fetches {last['cache_fetches']} (per process "
          f"{last['per_process_fetches']}), shard GETs at nginx {last['nginx_shard_gets']}, "
          f"shared waits {last['cache_shared_waits']}; disk reads {res['disk_read_kib']:.0f} KiB  "
          f"[one download per shard in every round: {'pass' if res['pass'] else 'FAIL'}]")
    return res


# ---- main --------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR") or "/tmp", "stoker-bench-cache"))
    ap.add_argument("--only", default="C1,C2,C3,C4")
    ap.add_argument("--parallel", default="8,4", help="C2's parallel transfers, the first also runs the cold feed")
    a = ap.parse_args()
    want = set(a.only.upper().split(","))
    plist = [int(x) for x in a.parallel.split(",") if x]
    for exe in (STK, SEQREAD, SERVE):
        if not os.access(exe, os.X_OK):
            sys.exit(f"cache.py: {exe} is missing: run `make bench-build` first")
    # SIGTERM (a runner's timeout) unwinds like Ctrl-C, so the servers are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.makedirs(a.work, exist_ok=True)
    t_start = time.monotonic()
    results = {"machine": {"cores": NCORES, "kernel": os.uname().release},
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rounds": a.rounds, "work": a.work}
    servers = Servers(a.work)
    failed = False

    def attempt(name, fn, *args):
        nonlocal failed
        t0 = time.monotonic()
        try:
            results[name] = fn(*args)
        except Skip as e:
            results[name] = {"skipped": str(e)}
            print(f"{name}  skipped: {e}")
        except Exception as e:  # noqa: BLE001 - one benchmark's failure must not lose the others
            failed = True
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{name}  error: {type(e).__name__}: {e}")
        if isinstance(results.get(name), dict):
            results[name]["bench_s"] = time.monotonic() - t0

    try:
        ds, shards, total = dataset(a.work)
        results["dataset"] = {"path": ds, "shards": len(shards), "bytes": total, "samples": DS_SAMPLES,
                              "record_bytes": DS_RECORD}
        if "C1" in want:
            attempt("C1", c1, a.work, ds, shards, total, a.rounds)
        if "C3" in want:
            try:
                attempt("C3", c3, a.work, servers, a.rounds)
            finally:
                servers.stop()
        if want & {"C2", "C4"}:
            try:
                origin = None
                try:
                    origin = servers.start("nginx", ds)
                except Skip as e:
                    for name in sorted(want & {"C2", "C4"}):
                        results[name] = {"skipped": str(e)}
                        print(f"{name}  skipped: {e}")
                if origin and "C2" in want:
                    attempt("C2", c2, a.work, shards, total, origin, a.rounds, plist)
                if origin and "C4" in want:
                    attempt("C4", c4, a.work, shards, total, origin, servers, a.rounds)
            finally:
                servers.stop()
    finally:
        servers.stop()
    results["total_s"] = time.monotonic() - t_start
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "cache.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote bench/results/cache.json ({results['total_s']:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
