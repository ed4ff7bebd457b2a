"""K2-K4 of issue 20: the checkpoint tier against the tools a team would
otherwise use, on this machine's disk and loopback servers.

  K2  blocking time of an asynchronous save (stoker.torch.CheckpointWriter
      under dcp.async_save; the C tier's stk_ckpt_save_async through
      build/bench/ckpt) against a synchronous torch.save (then fsync) and
      DCP's FileSystemWriter (sync_files) of the same state, same disk.
      Also stoker's writer under DCP's background staging (DefaultStager,
      use_async_staging), timed until the state is staged. Goal: <= 0.1.
  K3  `stoker ckpt drain` of one checkpoint to loopback nginx (WebDAV PUT)
      and to loopback S3 (moto) against curl uploading the same bytes at the
      same parallelism: over HTTP one object at a time (as the drain puts
      them), to S3 as the drain does, a multipart upload per object with its
      16 MiB parts 4 at a time (curl signs with --aws-sigv4 and an unsigned
      payload, where stoker hashes every body).
      Goal: >= 0.8 (curl's seconds over stoker's).
  K4  `stoker ckpt restore --no-stage` of that checkpoint from the origin
      (ranged reads straight into memory, every CRC checked, nothing
      written locally) against the cache's cold read of the same objects
      from the same origin (`stoker cache warm` into an empty cache
      directory). Goal: >= 0.9 (cache seconds over restore's). The staged
      restore (re-staged to disk, then loaded) is printed beside it, and the
      same restore run again from the now-local copy, as the load's share.

Every figure is the median of ROUNDS interleaved rounds (each round runs
every contender once); ratios are taken within a round, then the median.
The load average is printed beside each round: on a shared machine the
figures move with it. Writes bench/results/ckpt_k.json.

  ckpt_k.py [--size 512MiB] [--rounds 3] [--dir DIR] [--only K2,K3,K4] [--device cuda]

With --device cuda, K2's state is on the GPU, as in training: torch.save,
DCP and stoker's stage() each copy it off the GPU (stoker's into pinned
buffers it keeps); the C tier's figure still saves host memory.
"""
import argparse
import hashlib
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BENCH, ROOT, STK  # noqa: E402

SERVE = os.path.join(ROOT, "tests", "tools", "serve")
OBJECTS = 4
PART = 16 << 20      # the drain's multipart part (src/ckpt/s3.c PART_MIN)
PART_THREADS = 4     # parts put at once (src/ckpt/s3.c PART_THREADS)


def parse_size(s):
    units = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
             "g": 1 << 30, "gib": 1 << 30}
    s = s.strip().lower()
    i = len(s.rstrip("kmgib"))
    if i == 0 or s[i:] not in units:
        raise argparse.ArgumentTypeError("bad size %r (e.g. 512MiB, 2GiB)" % s)
    v = int(float(s[:i]) * units[s[i:]])
    if v <= 0 or v % (OBJECTS * PART):
        raise argparse.ArgumentTypeError("size must be a positive multiple of %d MiB"
                                         % (OBJECTS * PART >> 20))
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ckpt_k.py", description="issue 20's K2-K4")
    p.add_argument("--size", type=parse_size, default=parse_size("512MiB"),
                   help="checkpoint state in bytes (default 512MiB; the issue's is 2GiB)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=None, help="scratch directory on the disk measured "
                   "(default a temporary one under /var/tmp)")
    p.add_argument("--only", default="K2,K3,K4", help="comma-separated subset of K2,K3,K4")
    p.add_argument("--device", default="cpu", help="where K2's state lives (cpu, or cuda as a "
                   "model's does in training: every save then copies it off the GPU)")
    p.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "ckpt_k.json"))
    a = p.parse_args(argv)
    a.only = {k.strip().upper() for k in a.only.split(",") if k.strip()}
    bad = a.only - {"K2", "K3", "K4"}
    if bad or not a.only:
        p.error("--only takes K2, K3, K4 (got %s)" % (",".join(sorted(bad)) or "nothing"))
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    return a


def load():
    return os.getloadavg()[0]


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(cmd, env=None, **kw):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if r.returncode:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd)[:200], r.returncode,
                                                 (r.stderr or r.stdout).strip()[-400:]))
    return r.stdout


def f3(x):
    return "n/a" if x is None else "%.3f" % x


def med(rows, key):
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(v) if v else None


def fsync_tree(d):
    for f in glob.glob(os.path.join(d, "**"), recursive=True):
        if os.path.isfile(f):
            fd = os.open(f, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    fd = os.open(d, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


# ---- K2 ---------------------------------------------------------------------
def k2(a, scratch):
    import torch
    import torch.distributed.checkpoint as dcp
    import stoker
    import stoker.torch as st
    import warnings
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")

    if a.device != "cpu" and not (a.device.startswith("cuda") and torch.cuda.is_available()):
        sys.exit("ckpt_k: --device %s: torch finds no such device (CUDA available: %s)"
                 % (a.device, torch.cuda.is_available()))
    n = a.size // 4 // OBJECTS
    g = torch.Generator().manual_seed(1)
    state = {"layer%d.weight" % i: torch.rand(n, generator=g).to(a.device)
             for i in range(OBJECTS)}
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    rows = []
    for r in range(a.rounds):
        d = os.path.join(scratch, "k2")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        row = {"round": r + 1, "load_before": load()}

        def torch_save():
            p = os.path.join(d, "torch.pt")
            torch.save(state, p)
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        row["torch_save_s"] = timed(torch_save)
        shutil.rmtree(d)
        os.makedirs(d)

        fsw = os.path.join(d, "dcp-fs")
        row["dcp_fs_save_s"] = timed(lambda: dcp.save(
            state, storage_writer=dcp.FileSystemWriter(fsw, sync_files=True), no_dist=True))
        shutil.rmtree(fsw)
        # DCP's own writer under dcp.async_save: what DCP's staging alone blocks
        fw = dcp.FileSystemWriter(fsw, sync_files=True)
        t0 = time.perf_counter()
        fut = dcp.async_save(state, storage_writer=fw, no_dist=True)
        row["dcp_fs_async_block_s"] = time.perf_counter() - t0
        fut.result()
        shutil.rmtree(fsw)

        # stoker's writer under dcp.async_save: two saves on one writer, as in
        # training (the first also sets up DCP's stager); the second's
        # blocking time is the figure.
        w = st.CheckpointWriter(os.path.join(d, "stoker"), keep_last=1)
        blocks, totals = [], []
        for step in (1, 2):
            t0 = time.perf_counter()
            fut = dcp.async_save(state, storage_writer=w, checkpoint_id=step, no_dist=True)
            blocks.append(time.perf_counter() - t0)
            fut.result()
            totals.append(time.perf_counter() - t0)
        w.close()
        row["stoker_async_first_block_s"], row["stoker_async_block_s"] = blocks
        row["stoker_async_total_s"] = totals[1]
        shutil.rmtree(d)

        # The same with DCP's background staging (DefaultStager with
        # use_async_staging): async_save returns before the copy is done, and
        # training may change the state only once staging_completion is; that
        # later moment is the figure, the return time is printed beside it.
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
        stg = DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=False,
                                           use_async_staging=True, use_non_blocking_copy=False))
        w = st.CheckpointWriter(os.path.join(d, "stoker"), keep_last=1)
        ret = staged = None
        try:
            for step in (1, 2):
                t0 = time.perf_counter()
                resp = dcp.async_save(state, storage_writer=w, checkpoint_id=step, no_dist=True,
                                      async_stager=stg)
                ret = time.perf_counter() - t0
                resp.staging_completion.result()
                staged = time.perf_counter() - t0
                resp.upload_completion.result()
        except Exception as e:  # DCP's own stager (torch 2.11 on CUDA tensors: KeyError)
            ret = staged = None
            row["bgstage_error"] = "%s: %s" % (type(e).__name__, e)
            print("K2: DCP's DefaultStager (background staging) failed: %s" % row["bgstage_error"])
        stg.close()
        w.close()
        row["stoker_bgstage_return_s"], row["stoker_bgstage_staged_s"] = ret, staged
        shutil.rmtree(d)

        # The C tier's own async save (and its synchronous save) through
        # build/bench/ckpt, same bytes in OBJECTS objects.
        out = run([os.path.join(BENCH, "ckpt"), os.path.join(d, "c"), str(a.size),
                   str(OBJECTS), "4"])
        c = json.loads(out.strip().splitlines()[-1])
        row["c_sync_save_s"] = c["sync_save_s"]
        row["c_async_block_s"] = c["async_block_s"]
        row["c_async_first_block_s"] = c["async_first_block_s"]
        shutil.rmtree(d, ignore_errors=True)

        row["ratio_vs_torch_save"] = row["stoker_async_block_s"] / row["torch_save_s"]
        row["ratio_vs_dcp_fs"] = row["stoker_async_block_s"] / row["dcp_fs_save_s"]
        bg = row["stoker_bgstage_staged_s"]
        row["bgstage_ratio_vs_torch_save"] = None if bg is None else bg / row["torch_save_s"]
        row["bgstage_ratio_vs_dcp_fs"] = None if bg is None else bg / row["dcp_fs_save_s"]
        row["c_ratio_vs_torch_save"] = row["c_async_block_s"] / row["torch_save_s"]
        row["c_ratio_vs_c_sync"] = row["c_async_block_s"] / row["c_sync_save_s"]
        row["load_after"] = load()
        rows.append(row)
        print("K2 round %d (load %.1f -> %.1f): torch.save %.2f s, DCP FileSystemWriter %.2f s, "
              "DCP async block %.3f s, stoker async block %.3f s (first %.3f, total %.2f), C async block %.3f s "
              "(C sync %.2f) -> %.3f / %.3f of torch.save / DCP; with DCP's background "
              "staging: returns %s s, staged %s s -> %s of torch.save" %
              (r + 1, row["load_before"], row["load_after"], row["torch_save_s"],
               row["dcp_fs_save_s"], row["dcp_fs_async_block_s"], row["stoker_async_block_s"],
               row["stoker_async_first_block_s"], row["stoker_async_total_s"],
               row["c_async_block_s"], row["c_sync_save_s"], row["ratio_vs_torch_save"],
               row["ratio_vs_dcp_fs"], f3(row["stoker_bgstage_return_s"]),
               f3(row["stoker_bgstage_staged_s"]), f3(row["bgstage_ratio_vs_torch_save"])), flush=True)
    keys = [k for k in rows[0] if k not in ("round", "bgstage_error")]
    return {"rounds": rows, "median": {k: med(rows, k) for k in keys},
            "stoker_module": stoker.__file__}


# ---- servers ------------------------------------------------------------------
class Servers:
    def __init__(self, work):
        self.work = work
        os.makedirs(os.path.join(work, "www"), exist_ok=True)
        os.makedirs(os.path.join(work, "s3data"), exist_ok=True)
        self.dav = self._serve("nginx-dav", "www").splitlines()[0]
        out = self._serve("s3", "s3data", "bench").splitlines()
        self.s3, (self.key, self.secret) = out[0], out[1].split()[:2]
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID=self.key, AWS_SECRET_ACCESS_KEY=self.secret,
                        AWS_ENDPOINT_URL=self.s3, AWS_SHARED_CREDENTIALS_FILE="no-such-file",
                        AWS_CONFIG_FILE="no-such-file")
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            self.env.pop(k, None)

    def _serve(self, *args):
        return run([SERVE] + list(args), cwd=self.work)

    def stop(self):
        subprocess.run([SERVE, "stop"], cwd=self.work, capture_output=True)


def curl_http(files, base):
    cmd = ["curl", "-sSf", "-o", "/dev/null"]
    for f in files:
        cmd += ["-T", f, "%s/%s" % (base, os.path.basename(f))]
    run(cmd)


def curl_s3(objs, parts, url, srv):
    """Each object as the drain puts it: a multipart upload (begun, its
    16 MiB parts put PART_THREADS at a time by one curl --parallel,
    completed), objects one after another; the manifest as one PUT. The
    parts' ETags (their MD5s) are worked out before the clock starts."""
    sig = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "%s:%s" % (srv.key, srv.secret),
           "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    for o in objs:
        name = os.path.basename(o)
        if name == "MANIFEST.json":
            run(["curl", "-sSf", "-o", "/dev/null"] + sig + ["-T", o, "%s/%s" % (url, name)])
            continue
        out = run(["curl", "-sSf", "-X", "POST"] + sig + ["%s/%s?uploads=" % (url, name)])
        uid = re.search(r"<UploadId>([^<]+)</UploadId>", out).group(1)
        mine = [(p, etag) for p, etag in parts if os.path.basename(p).startswith(name + ".")]
        cmd = ["curl", "-sSf", "-o", "/dev/null", "--parallel", "--parallel-max",
               str(PART_THREADS)] + sig
        for k, (p, _) in enumerate(mine):
            cmd += ["-T", p, "%s/%s?partNumber=%d&uploadId=%s" % (url, name, k + 1, uid)]
        run(cmd)
        body = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
            "<Part><PartNumber>%d</PartNumber><ETag>\"%s\"</ETag></Part>" % (k + 1, e)
            for k, (_, e) in enumerate(mine))
        run(["curl", "-sSf", "-o", "/dev/null", "-X", "POST", "-H", "Content-Type: application/xml",
             "--data-binary", body] + sig + ["%s/%s?uploadId=%s" % (url, name, uid)])


# ---- K3 and K4 ------------------------------------------------------------------
def k34(a, scratch):
    work = os.path.join(scratch, "k34")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    srv = Servers(work)
    try:
        return _k34(a, work, srv)
    finally:
        srv.stop()


def _k34(a, work, srv):
    src = os.path.join(work, "src")
    os.makedirs(src)
    files = []
    per = a.size // OBJECTS
    for i in range(OBJECTS):
        f = os.path.join(src, "tensor%d.bin" % i)
        with open(f, "wb") as fh:
            left = per
            while left:
                n = min(left, 64 << 20)
                fh.write(os.urandom(n))
                left -= n
        files.append(f)
    local = os.path.join(work, "local")
    run([STK, "ckpt", "save", local, "--step", "1"] + files)
    step = os.path.basename(glob.glob(os.path.join(local, "step-*"))[0])
    sdir = os.path.join(local, step)
    objs = sorted(glob.glob(os.path.join(sdir, "*.obj")))
    # curl's S3 pieces: the drain's 16 MiB parts, cut once (not timed)
    parts_dir = os.path.join(work, "parts")
    os.makedirs(parts_dir)
    parts = []
    for o in objs:
        with open(o, "rb") as fh:
            k = 0
            while True:
                b = fh.read(PART)
                if not b:
                    break
                p = os.path.join(parts_dir, "%s.part%04d" % (os.path.basename(o), k))
                with open(p, "wb") as out:
                    out.write(b)
                parts.append((p, hashlib.md5(b).hexdigest()))
                k += 1
    manifest = os.path.join(sdir, "MANIFEST.json")
    upload = objs + [manifest]

    def undrain():
        for f in ("DRAINED", ".drain-progress"):
            try:
                os.unlink(os.path.join(sdir, f))
            except FileNotFoundError:
                pass

    def drain(origin):
        undrain()
        run([STK, "ckpt", "drain", local, "--origin", origin], env=srv.env)
        if not os.path.exists(os.path.join(sdir, "DRAINED")):
            raise RuntimeError("drain to %s left no DRAINED" % origin)

    rows = []
    for r in range(a.rounds):
        row = {"round": r + 1, "load_before": load()}
        http_run = "%s/stk%d" % (srv.dav, r)
        s3_run = "s3://bench/stk%d" % r
        # K4 restores what the drain put (curl's uploads are K3's alone)
        row["drain_http_s"] = timed(lambda: drain(http_run))
        row["drain_s3_s"] = timed(lambda: drain(s3_run))
        if "K3" in a.only:
            row["curl_http_s"] = timed(lambda: curl_http(upload, "%s/curl%d" % (srv.dav, r)))
            row["curl_s3_s"] = timed(lambda: curl_s3(upload, parts, "%s/bench/curl%d" % (srv.s3, r), srv))
            row["k3_http_ratio"] = row["curl_http_s"] / row["drain_http_s"]
            row["k3_s3_ratio"] = row["curl_s3_s"] / row["drain_s3_s"]
            print("K3 round %d (load %.1f): nginx drain %.2f s, curl %.2f s -> %.3f; "
                  "S3 drain %.2f s, curl %.2f s -> %.3f" %
                  (r + 1, row["load_before"], row["drain_http_s"], row["curl_http_s"],
                   row["k3_http_ratio"], row["drain_s3_s"], row["curl_s3_s"],
                   row["k3_s3_ratio"]), flush=True)
        if "K4" in a.only:
            for kind, origin in (("http", http_run), ("s3", s3_run)):
                rdir = os.path.join(work, "restore")
                cdir = os.path.join(work, "cache")
                shutil.rmtree(rdir, ignore_errors=True)
                shutil.rmtree(cdir, ignore_errors=True)
                row["restore_%s_s" % kind] = timed(lambda: run(
                    [STK, "ckpt", "restore", rdir, "--origin", origin], env=srv.env))
                # the same restore again, now from the local copy: the part of
                # the restore that reads the objects back into memory
                row["restore_local_%s_s" % kind] = timed(lambda: run(
                    [STK, "ckpt", "restore", rdir, "--origin", origin], env=srv.env))
                # restore without staging: the origin's bytes straight into
                # memory, nothing written to the local directory
                shutil.rmtree(rdir, ignore_errors=True)
                row["restore_nostage_%s_s" % kind] = timed(lambda: run(
                    [STK, "ckpt", "restore", rdir, "--origin", origin, "--no-stage"], env=srv.env))
                urls = "%s/%s/{%05d..%05d}.obj" % (origin, step, 0, len(objs) - 1)
                row["cache_cold_%s_s" % kind] = timed(lambda: run(
                    [STK, "cache", "warm", urls, "--cache-dir", cdir, "--format", "files", "-q"],
                    env=srv.env))
                row["k4_staged_%s_ratio" % kind] = row["cache_cold_%s_s" % kind] / row["restore_%s_s" % kind]
                row["k4_%s_ratio" % kind] = (row["cache_cold_%s_s" % kind] /
                                             row["restore_nostage_%s_s" % kind])
            shutil.rmtree(os.path.join(work, "restore"), ignore_errors=True)
            shutil.rmtree(os.path.join(work, "cache"), ignore_errors=True)
            print("K4 round %d (load %.1f): nginx restore --no-stage %.2f s, staged %.2f s (of "
                  "which a local restore %.2f s), cache cold %.2f s -> %.3f (staged %.3f); S3 "
                  "restore --no-stage %.2f s, staged %.2f s (local %.2f s), cache cold %.2f s -> "
                  "%.3f (staged %.3f)" %
                  (r + 1, load(), row["restore_nostage_http_s"], row["restore_http_s"],
                   row["restore_local_http_s"], row["cache_cold_http_s"], row["k4_http_ratio"],
                   row["k4_staged_http_ratio"], row["restore_nostage_s3_s"], row["restore_s3_s"],
                   row["restore_local_s3_s"], row["cache_cold_s3_s"], row["k4_s3_ratio"],
                   row["k4_staged_s3_ratio"]),
                  flush=True)
        # this round's copies at nginx go: the disk holds one round's at a time
        for d in glob.glob(os.path.join(work, "www", "*%d" % r)):
            shutil.rmtree(d, ignore_errors=True)
        row["load_after"] = load()
        rows.append(row)
    keys = [k for k in rows[0] if k != "round"]
    return {"rounds": rows, "median": {k: med(rows, k) for k in keys}, "objects": len(objs),
            "step_dir": step}


def main(argv):
    a = parse_args(argv)
    for p in (STK, os.path.join(BENCH, "ckpt")):
        if not os.access(p, os.X_OK):
            sys.exit("ckpt_k: %s is missing: run `make bench-build` first" % p)
    base = a.dir or "/var/tmp"
    os.makedirs(base, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="stoker-ckpt-k-", dir=base)
    res = {"bytes": a.size, "rounds": a.rounds, "cpus": os.cpu_count(), "dir": scratch,
           "device": a.device}
    print("ckpt_k: %d MiB state in %d objects on %s, %d rounds, scratch %s, %d CPUs, load %.1f" %
          (a.size >> 20, OBJECTS, a.device, a.rounds, scratch, os.cpu_count(), load()), flush=True)
    try:
        if "K2" in a.only:
            res["k2"] = k2(a, scratch)
        if a.only & {"K3", "K4"}:
            res["k34"] = k34(a, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("medians:")
    if "k2" in res:
        m = res["k2"]["median"]
        print("  K2 stoker async block / torch.save %.3f, / DCP FileSystemWriter %.3f "
              "(goal <= 0.1); with DCP's background staging (until staged) %s / %s; "
              "C async block / torch.save %.3f" %
              (m["ratio_vs_torch_save"], m["ratio_vs_dcp_fs"], f3(m["bgstage_ratio_vs_torch_save"]),
               f3(m["bgstage_ratio_vs_dcp_fs"]), m["c_ratio_vs_torch_save"]))
    if "k34" in res:
        m = res["k34"]["median"]
        if "K3" in a.only:
            print("  K3 curl / drain: nginx %.3f, S3 %.3f (goal >= 0.8)" %
                  (m["k3_http_ratio"], m["k3_s3_ratio"]))
        if "K4" in a.only:
            print("  K4 cache cold / restore --no-stage: nginx %.3f, S3 %.3f (goal >= 0.9); "
                  "against the staged restore: nginx %.3f, S3 %.3f" %
                  (m["k4_http_ratio"], m["k4_s3_ratio"], m["k4_staged_http_ratio"],
                   m["k4_staged_s3_ratio"]))
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
