"""bench/python.py's P4 and P5 (see python.py's docstring for what each
measures); split out to keep each file small."""
import io
import json
import os
import subprocess
import tarfile
import time

from benchlib import ROOT, files_of, pgpgin_kib, warm

import torch
import stoker
import stoker.torch as st


def vmstat(name):
    with open("/proc/vmstat") as f:
        for line in f:
            if line.startswith(name + " "):
                return int(line.split()[1])
    return 0


def inblock():
    """512-byte blocks read from storage by this process and its reaped
    children (an anchor's process, its DataLoader workers)."""
    import resource
    return sum(resource.getrusage(w).ru_inblock
               for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


class Reads:
    """Storage reads over a run: the run's own (read_kib: this process and
    its children, from getrusage's ru_inblock) and the whole machine's
    (/proc/vmstat pgpgin and pgmajfault; the machine is shared, so those
    may be other processes')."""

    def __enter__(self):
        self.kib, self.maj, self.blk = pgpgin_kib(), vmstat("pgmajfault"), inblock()
        return self

    def __exit__(self, *exc):
        self.out = {"read_kib": (inblock() - self.blk) // 2, "pgpgin_kib": pgpgin_kib() - self.kib,
                    "pgmajfault": vmstat("pgmajfault") - self.maj}


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def cpu_s():
    import resource
    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        s = resource.getrusage(who)
        t += s.ru_utime + s.ru_stime
    return t


# ---- P4: WebDataset dict samples ---------------------------------------------

def p4_data(samples, shard_samples=128):
    """WebDataset shards of jpg + cls + json: the JPEGs (500x375, ImageNet's
    most common size) and labels written by stoker.gen into class folders,
    repacked with a JSON member per sample. Made once under /tmp."""
    base = os.path.join("/tmp", f"stoker-bench-p4-{samples}")
    wds_dir = os.path.join(base, "wds")
    if os.path.exists(os.path.join(base, ".done")):
        return wds_dir
    jpg_dir = os.path.join(base, "jpg")
    stoker.gen(jpg_dir, force=True, samples=samples, format="files", jpeg=(500, 375, 500, 375),
               classes=10, seed=4)
    items = sorted((os.path.join(d, f), int(os.path.basename(d)))
                   for d in (os.path.join(jpg_dir, c) for c in os.listdir(jpg_dir))
                   for f in os.listdir(d))
    os.makedirs(wds_dir, exist_ok=True)
    for s in range(0, len(items), shard_samples):
        with tarfile.open(os.path.join(wds_dir, f"shard-{s // shard_samples:05d}.tar"), "w") as tf:
            for i, (path, label) in enumerate(items[s:s + shard_samples], s):
                key = f"{i:08d}"
                meta = {"key": key, "label": label, "width": 500, "height": 375,
                        "source": os.path.basename(path)}
                with open(path, "rb") as f:
                    jpg = f.read()
                for ext, data in (("jpg", jpg), ("cls", str(label).encode()),
                                  ("json", json.dumps(meta).encode())):
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
                    tf.addfile(ti, io.BytesIO(data))
    open(os.path.join(base, ".done"), "w").close()
    return wds_dir


def p4_stoker(wds_dir, threads, images="c"):
    """stoker.torch's dict samples: the same work as anchors_p4.py's. images:
    "c" decodes the jpg in the loader's C threads (the default), "python"
    in Python (torchvision's decode_image, as before image_fields)."""
    c0, t0, n = cpu_s(), time.perf_counter(), 0  # opening included
    ds = st.loader(wds_dir, 64, decode="fields", field="jpg,cls,json", format="wds", seed=1,
                   rank=0, world_size=1, transform_threads=threads,
                   image_fields="*" if images == "c" else "")
    for b in ds:
        x, y, meta = b["jpg"], b["cls"], b["json"]
        assert x.dtype == torch.uint8 and x.dim() == 4 and x.shape[1] == 3, (x.dtype, x.shape)
        assert len(y) == x.shape[0] and len(meta) == x.shape[0] and isinstance(meta[0], dict)
        n += x.shape[0]
    ds.close()
    wall = time.perf_counter() - t0
    return {"threads": threads, "images": images, "samples": n, "samples_per_s": n / wall,
            "cpu_s_per_1000": (cpu_s() - c0) / n * 1000}


def p4_wds(py, wds_dir, workers, image):
    r = subprocess.run([py, os.path.join(ROOT, "bench", "anchors_p4.py"), wds_dir, str(workers),
                        image], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        return {"error": (lines[-1] if lines else f"exit status {r.returncode}")[:240]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def p4(a, anchors_py, anchor_why):
    """Rounds interleaved: in each, every stoker setting and every webdataset
    setting once, the shards read whole just before each run. Each
    setting's median over the rounds; each side's best setting compared."""
    wds_dir = p4_data(a.p4_samples)
    files = files_of(wds_dir)
    threads = [int(x) for x in a.p4_threads.split(",") if x]
    modes = [x for x in a.p4_images.split(",") if x]
    workers = [int(x) for x in a.p4_workers.split(",") if x]
    images = [x for x in a.p4_image.split(",") if x]
    runs = {}
    for rnd in range(a.rounds):
        for m in modes:
            for t in threads:
                warm(files)
                with Reads() as rd:
                    r = p4_stoker(wds_dir, t, m)
                r.update(rd.out)
                runs.setdefault(f"stoker_{m}_t{t}" if m != "c" else f"stoker_t{t}", []).append(r)
        if anchor_why:
            continue
        for img in images:
            for w in workers:
                warm(files)
                with Reads() as rd:
                    r = p4_wds(anchors_py, wds_dir, w, img)
                if "error" in r:
                    print(f"P4 webdataset {img} workers={w}: not measured: {r['error']}", flush=True)
                    anchor_why = r["error"]
                    break
                r.update(rd.out)
                runs.setdefault(f"wds_{img}_w{w}", []).append(r)
            if anchor_why:
                break
        print(f"P4 round {rnd + 1}/{a.rounds} done", flush=True)
    rows = {}
    for k, rs in runs.items():
        rows[k] = {"samples_per_s": median([r["samples_per_s"] for r in rs]),
                   "cpu_s_per_1000": median([r["cpu_s_per_1000"] for r in rs]),
                   "samples": rs[0]["samples"], "runs": rs}
        if k.startswith("wds"):
            rows[k]["name"] = (f"webdataset {rs[0]['version']} decode('{rs[0]['image']}'), "
                               f"DataLoader num_workers={rs[0]['workers']}")
        else:
            rows[k]["name"] = (f"stoker.torch decode='fields', images in {rs[0]['images']}, "
                               f"transform_threads={rs[0]['threads']}")
    out = {"samples": a.p4_samples, "rounds": a.rounds, "rows": rows}
    st_best = max((v for k, v in rows.items() if k.startswith("stoker") and
                   v["runs"][0]["images"] == "c"),
                  key=lambda v: v["samples_per_s"])
    wds_rows = [v for k, v in rows.items() if k.startswith("wds")]
    print(f"\nP4: WebDataset jpg + cls + json, {a.p4_samples} samples (500x375 JPEG) in "
          f"{len(files)} shards, batch 64, one epoch a run, opening included; median of "
          f"{a.rounds} interleaved rounds, data warmed before each run")
    print(f"{'loader':<66} {'samples/s':>9} {'CPU-s/1000':>10} {'read KiB':>8}")
    for r in rows.values():
        kib = max(x["read_kib"] for x in r["runs"])
        print(f"{r['name']:<66} {r['samples_per_s']:>9.0f} {r['cpu_s_per_1000']:>10.2f} {kib:>8}")
    if wds_rows:
        best = max(wds_rows, key=lambda v: v["samples_per_s"])
        own = [v for k, v in rows.items() if k.startswith("wds_torchrgb8")]
        out["speedup_vs_best_wds"] = st_best["samples_per_s"] / best["samples_per_s"]
        out["cpu_ratio_vs_best_wds"] = st_best["cpu_s_per_1000"] / best["cpu_s_per_1000"]
        print(f"stoker's best over webdataset's best ({best['name']}): "
              f"{out['speedup_vs_best_wds']:.2f}x the samples/s at "
              f"{out['cpu_ratio_vs_best_wds']:.2f}x the CPU per sample")
        if own:
            ob = max(own, key=lambda v: v["samples_per_s"])
            out["speedup_vs_wds_own_decoder"] = st_best["samples_per_s"] / ob["samples_per_s"]
            print(f"over webdataset's own decoder at its best ({ob['name']}): "
                  f"{out['speedup_vs_wds_own_decoder']:.2f}x")
    else:
        out["anchor_error"] = anchor_why
        print(f"webdataset: not measured: {anchor_why}")
    print("(read KiB: read from storage by the run's processes, the largest of the rounds; "
          "the whole machine's pgpgin is in the JSON)\n", flush=True)
    return out


# ---- P5: open to first batch on class folders ----------------------------------

def p5_data(n, classes=1000):
    """n empty .JPEG files in `classes` class folders (ImageNet's layout:
    1.28 million files in 1000 folders): the scan, not the reading, is
    measured, and empty files cost inodes only. Written under /tmp."""
    root = os.path.join("/tmp", f"stoker-bench-p5-{n}")
    if os.path.exists(os.path.join(root, ".done")):
        return root
    for c in range(classes):
        d = os.path.join(root, f"n{c:08d}")
        os.makedirs(d, exist_ok=True)
        for i in range(c, n, classes):
            name = os.path.join(d, f"n{c:08d}_{i}.JPEG")
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
    open(os.path.join(root, ".done"), "w").close()
    return root


def p5_stoker(root):
    t0 = time.perf_counter()
    with stoker.Loader(root, 64, format="files", seed=1) as ld:
        b = next(iter(ld))
        n, total = len(b), ld.dataset_info()["samples"]
        t1 = time.perf_counter()
        del b
    return {"s": t1 - t0, "first_batch": n, "samples": total}


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def p5_imagefolder(root):
    import torchvision.datasets as tvd
    t0 = time.perf_counter()
    ds = tvd.ImageFolder(root, loader=_read)
    x, y = ds[0]
    t1 = time.perf_counter()
    return {"s": t1 - t0, "first_batch": 1, "samples": len(ds)}


def p5(n, rounds=3, keep=False):
    """Open to first batch: stoker.Loader over the class folders to its first
    batch of 64, against torchvision's ImageFolder to its first sample (its
    scan: every folder listed, every name checked for an image extension);
    the page cache warm (the tree walked once before each run), reads
    recorded beside; median of `rounds` interleaved rounds. The files are
    deleted afterwards unless keep."""
    t0 = time.perf_counter()
    root = p5_data(n)
    made = time.perf_counter() - t0
    runs = {"stoker": [], "imagefolder": []}
    try:
        for _ in range(rounds):
            for k, fn in (("stoker", p5_stoker), ("imagefolder", p5_imagefolder)):
                for _base, _dirs, _names in os.walk(root):  # dentries and inodes cached
                    pass
                with Reads() as rd:
                    r = fn(root)
                r.update(rd.out)
                runs[k].append(r)
    finally:
        if not keep:
            subprocess.run(["rm", "-rf", root], check=False)
    out = {"files": n, "classes": 1000, "rounds": rounds, "made_s": made, "runs": runs}
    for k in runs:
        out[k + "_s"] = median([r["s"] for r in runs[k]])
    out["speedup"] = out["imagefolder_s"] / out["stoker_s"]
    print(f"\nP5: open to first batch, {n} empty .JPEG files in 1000 class folders, page cache "
          f"warm, median of {rounds} rounds")
    print(f"{'loader':<58} {'seconds':>8} {'read KiB':>8}")
    for k, name in (("stoker", "stoker.Loader(format='files'), to its first batch of 64"),
                    ("imagefolder", "torchvision ImageFolder, to its first sample")):
        print(f"{name:<58} {out[k + '_s']:>8.2f} {max(r['read_kib'] for r in runs[k]):>8}")
    print(f"stoker {out['speedup']:.1f}x faster to its first batch (files written in {made:.0f} s, "
          f"{'kept' if keep else 'deleted'} after)\n", flush=True)
    return out
