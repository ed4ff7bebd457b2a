#!/usr/bin/python3
"""Python binding benchmarks, each a ratio measured in one run:

P1  the ResNet-50 input pipeline on --p1-images (3,000) JPEGs cut from real
    photographs (bench/photos.py: random crops of the photos Debian's
    python3-sklearn and python3-skimage ship, 300 to 640 px a side,
    quality 75 to 95, in 10 class folders; made once into a cache folder
    under /tmp), RandomResizedCrop 224 + flip, u8 CHW tensors and labels,
    batch 64. stoker.torch against torch's DataLoader over torchvision's
    ImageFolder and transforms.v2, decoding with PIL and with
    torchvision.io.decode_jpeg, at num_workers 0, 1, 2, 3, and against the
    anchors from PyPI (bench/anchors_p1.py, run in .venv-anchors, which
    bench/anchors-setup installs): NVIDIA DALI's CPU pipeline and SPDL's
    image pipeline, each at its best thread count of 1..cores (swept in
    round 1). --rounds interleaved rounds (every contender once a round,
    the files read whole before every run), medians; samples/s and
    CPU-seconds per 1000 samples (this process, its threads and its
    worker processes), timed from before the dataset is opened to after
    the last batch; an anchor that cannot run gets one line saying why.
    The load average is printed per round.
P2  binding overhead: raw 128 KiB records through Python (each batch
    touched) against `stoker feed` (the C loader) on the same data, as P1
    measures: interleaved rounds, the files read whole before every run,
    medians, disk reads and the load average recorded. Goal >= 0.9.
P3  a real loop: a small CNN on CPU (4x average pooling first, so a step
    takes tens of ms, as on an accelerator) fed by each loader; the share of step
    time spent waiting for input, from the loader's own stats (stoker) and
    a wall-clock split (both).
P4  WebDataset dict samples (jpg + cls + json; bench/python_p45.py):
    stoker.torch's decode="fields" (the jpg decoded to a uint8 CHW tensor,
    cls an int, json parsed) against the `webdataset` library's own
    loader doing the same work in torch's DataLoader at num_workers 0..3
    (bench/anchors_p4.py, in .venv-anchors); each side's best setting,
    medians of --rounds interleaved rounds, the shards read whole before
    every run, opening included; storage reads (pgpgin) beside.
P5  open to first batch on --p5-files empty class-folder files (1000
    folders; 1,280,000 is ImageNet's count): stoker.Loader to its first
    batch against torchvision's ImageFolder scan to its first sample, the
    page cache warm, reads beside; the files are written under /tmp and
    deleted afterwards.

--only picks the benchmarks (P1,P2,P3,P4,P5 by default). Prints a table
and writes bench/results/python.json (python-P4.json and so on when P1 is
not among them). Figures taken on a
shared machine are preliminary: the load average is recorded beside them."""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import NCORES, ROOT, STK, warm, files_of, pgpgin_kib  # noqa: E402
import photos  # noqa: E402
import python_p45 as p45  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import stoker  # noqa: E402
import stoker.torch as st  # noqa: E402

# P1's num_workers=3 is over the 2 cores here on purpose (the sweep's top).
warnings.filterwarnings("ignore", message="This DataLoader will create")


def cpu_s(children=True):
    s = resource.getrusage(resource.RUSAGE_SELF)
    t = s.ru_utime + s.ru_stime
    if children:
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        t += c.ru_utime + c.ru_stime
    return t


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def dataset(dirname, **kw):
    d = os.path.join(tempfile.gettempdir(), dirname)
    if not os.path.exists(os.path.join(d, ".done")):
        stoker.gen(d, force=True, **kw)
        open(os.path.join(d, ".done"), "w").close()
    return d


# ---- P1 ---------------------------------------------------------------------

def p1_data(images, seed=1):
    """P1's photo crops (bench/photos.py), made once into a cache folder."""
    d = os.path.join(tempfile.gettempdir(), f"stoker-bench-p1-photos-{images}-s{seed}")
    if not os.path.exists(os.path.join(d, ".done")):
        shutil.rmtree(d, ignore_errors=True)
        print(f"P1: writing {images} JPEGs cut from photographs into {d}", flush=True)
        photos.crops(d, images, seed=seed)
        open(os.path.join(d, ".done"), "w").close()
    return d


def read_tv(path):
    """ImageFolder's loader for the torchvision.io rows: the file's bytes
    decoded by torchvision.io.decode_jpeg to a uint8 CHW tensor."""
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    return decode_jpeg(read_file(path), mode=ImageReadMode.RGB)


def p1_torch(root, workers, samples, decoder="pil"):
    import torchvision.datasets as tvd
    from torchvision.transforms import v2
    c0, t0, n = cpu_s(), time.perf_counter(), 0  # opening (the folder scan) included
    steps = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
    if decoder == "pil":
        ds = tvd.ImageFolder(root, transform=v2.Compose(steps + [v2.PILToTensor()]))
    else:
        ds = tvd.ImageFolder(root, loader=read_tv, transform=v2.Compose(steps))
    # Its best setting: workers persist into a second epoch (started once).
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                                     drop_last=True, persistent_workers=workers > 0)
    it = iter(dl)
    while n < samples:
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        assert x.dtype == torch.uint8 and x.shape[1:] == (3, 224, 224)
        n += x.shape[0]
    del it, dl  # workers exit (and are reaped) before the CPU is read
    wall = time.perf_counter() - t0
    return {"samples": n, "samples_per_s": n / wall, "cpu_s_per_1000": (cpu_s() - c0) / n * 1000}


def p1_stoker(root, samples):
    c0, t0, n = cpu_s(), time.perf_counter(), 0  # opening included
    ds = st.loader(root, 64, decode="jpeg", layout="chw", format="files", seed=1,
                   drop_last=True, rank=0, world_size=1)
    while n < samples:
        for x, y in ds:
            assert x.dtype == torch.uint8 and x.shape[1:] == (3, 224, 224)
            n += x.shape[0]
            if n >= samples:
                break
    wall = time.perf_counter() - t0
    return {"samples": n, "samples_per_s": n / wall, "cpu_s_per_1000": (cpu_s() - c0) / n * 1000}


ANCHORS_VENV = os.path.join(ROOT, os.environ.get("ANCHORS_VENV", ".venv-anchors"))
# Each P1 anchor: its row's name, and the line of bench/anchors-requirements.txt
# whose install it needs.
ANCHORS = {"dali": ("DALI CPU pipeline", "nvidia-dali-cuda130"),
           "dali_plain": ("DALI CPU, separate ops", "nvidia-dali-cuda130"),
           "spdl": ("SPDL image pipeline", "spdl")}


def anchors_status():
    """bench/anchors-setup's record: package -> "ok" or why it is missing."""
    try:
        with open(os.path.join(ANCHORS_VENV, "anchors-status")) as f:
            return dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)
    except OSError:
        return {}


def p1_anchor(lib, root, samples, threads, before_run=lambda: None):
    """One anchor at each thread count, each run in its own process in the
    anchors' environment; the best samples/s is kept (with all runs beside
    it). Never a number that was not measured: {"error": why} instead."""
    py = os.path.join(ANCHORS_VENV, "bin", "python")
    if not os.path.exists(py):
        shown = (os.path.relpath(ANCHORS_VENV, ROOT) if ANCHORS_VENV.startswith(ROOT + os.sep)
                 else ANCHORS_VENV)
        return {"error": f"not installed: no {shown} "
                         "(bench/anchors-setup makes it; see its output above)"}
    why = anchors_status().get(ANCHORS[lib][1], "ok")
    if why != "ok":
        return {"error": why}
    runs = []
    for t in threads:
        before_run()
        try:
            r = subprocess.run([py, os.path.join(ROOT, "bench", "anchors_p1.py"), lib, root,
                                str(t), str(samples)], capture_output=True, text=True,
                               timeout=max(300, samples))
        except subprocess.TimeoutExpired:
            return {"error": f"threads={t}: no result within {max(300, samples)} s", "runs": runs}
        if r.returncode != 0:
            lines = [x for x in r.stderr.splitlines() if x.strip()]
            why = lines[-1] if lines else f"exit status {r.returncode}"
            return {"error": f"threads={t}: {why}"[:240], "runs": runs}
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    best = dict(max(runs, key=lambda v: v["samples_per_s"]))
    best["runs"] = [{k: v[k] for k in ("threads", "samples_per_s", "cpu_s_per_1000")}
                    for v in runs]
    return best


P1_TORCH = {"pil": "DataLoader + ImageFolder (PIL)",
            "tv": "DataLoader + ImageFolder (torchvision.io.decode_jpeg)"}


def p1_row(runs):
    """Medians of a contender's rounds."""
    return {"samples_per_s": statistics.median(r["samples_per_s"] for r in runs),
            "cpu_s_per_1000": statistics.median(r["cpu_s_per_1000"] for r in runs),
            "rounds": [{k: r[k] for k in ("samples_per_s", "cpu_s_per_1000")} for r in runs]}


def p1(a):
    """--rounds interleaved rounds of every P1 contender (each once a round),
    the data warmed before each run (the kernel here drops pages left
    untouched for about 30 s), medians kept; each anchor's thread count is
    its best of round 1's sweep. Then the table, with stoker's throughput
    and CPU per sample as ratios to each row."""
    root = p1_data(a.p1_images)
    files = files_of(root, ".jpg")
    samples = a.samples or -(-len(files) // 64) * 64  # every image at least once
    workers = [int(x) for x in a.workers.split(",") if x]
    threads = [int(x) for x in a.anchor_threads.split(",") if x]
    libs = [x for x in a.anchors.split(",") if x]
    runs, errors, sweeps, loads = {}, {}, {}, []

    def note(key, name, r):
        runs.setdefault(key, []).append(r)
        print(f"P1   {name}: {r['samples_per_s']:.0f} samples/s, "
              f"{r['cpu_s_per_1000']:.2f} CPU-s/1000", flush=True)

    for rnd in range(a.rounds):
        load0 = loadavg()
        print(f"P1 round {rnd + 1}/{a.rounds}: load average {load0}", flush=True)
        for dec in P1_TORCH:
            for w in workers:
                warm(files)
                note(f"{dec}_w{w}", f"{P1_TORCH[dec]}, num_workers={w}",
                     p1_torch(root, w, samples, dec))
        for lib in libs:
            if lib in errors:
                continue
            ts = threads if rnd == 0 else [runs[lib][0]["threads"]]
            r = p1_anchor(lib, root, samples, ts, lambda: warm(files))
            if "error" in r:
                errors[lib] = r["error"]
                print(f"P1   {ANCHORS[lib][0]}: not measured: {r['error']}", flush=True)
                continue
            if rnd == 0:
                sweeps[lib] = r["runs"]
            note(lib, f"{ANCHORS[lib][0]}, threads={r['threads']}", r)
        warm(files)
        note("stoker", "stoker.torch", p1_stoker(root, samples))
        loads.append([load0, loadavg()])
        print(f"P1 round {rnd + 1}: load average {load0} before, {loads[-1][1]} after", flush=True)

    rows = {}
    for key, rs in runs.items():
        row = rows[key] = p1_row(rs)
        if key == "stoker":
            row["name"] = "stoker.torch"
        elif key in ANCHORS:
            row["name"] = f"{ANCHORS[key][0]} {rs[0]['version']}, threads={rs[0]['threads']}"
            row["threads"], row["sweep"] = rs[0]["threads"], sweeps[key]
        else:
            dec, w = key.rsplit("_w", 1)
            row["name"] = f"{P1_TORCH[dec]}, num_workers={w}"
    for lib, why in errors.items():
        rows[lib] = {"name": ANCHORS[lib][0], "error": why}
    st_row = rows["stoker"]
    best_key = max((k for k in rows if k.split("_w")[0] in P1_TORCH),
                   key=lambda k: rows[k]["samples_per_s"])
    best = rows[best_key]
    out = {"images": len(files), "data": root, "samples": samples, "rounds": a.rounds,
           "load_per_round": loads, "rows": rows, "best_dataloader": best_key,
           "speedup_vs_best": st_row["samples_per_s"] / best["samples_per_s"],
           "cpu_ratio_vs_best": st_row["cpu_s_per_1000"] / best["cpu_s_per_1000"]}
    goal = [out["speedup_vs_best"] >= 3 and out["cpu_ratio_vs_best"] <= 1 / 3]
    for lib in ANCHORS:
        if lib in rows and "error" not in rows[lib]:
            out[f"speedup_vs_{lib}"] = st_row["samples_per_s"] / rows[lib]["samples_per_s"]
            out[f"cpu_ratio_vs_{lib}"] = st_row["cpu_s_per_1000"] / rows[lib]["cpu_s_per_1000"]
            goal.append(out[f"speedup_vs_{lib}"] >= 1 and out[f"cpu_ratio_vs_{lib}"] <= 1)
    out["goal_met"] = all(goal) and all(lib in rows and "error" not in rows[lib]
                                        for lib in ("dali", "spdl"))

    print(f"\nP1: {len(files)} JPEGs cut from photographs, decode + RandomResizedCrop 224 + flip, "
          f"u8 CHW, batch 64, {samples} samples a run, opening included, medians of "
          f"{a.rounds} interleaved rounds (torch {torch.__version__})")
    print(f"{'loader':<66} {'samples/s':>9} {'CPU-s/1000':>10} {'stoker x':>8} {'CPU x':>6}")
    for k, r in rows.items():
        if "error" in r:
            print(f"{r['name']:<66} not measured: {r['error']}")
            continue
        ratio = (f"{st_row['samples_per_s'] / r['samples_per_s']:>8.2f} "
                 f"{st_row['cpu_s_per_1000'] / r['cpu_s_per_1000']:>6.2f}" if k != "stoker" else "")
        print(f"{r['name']:<66} {r['samples_per_s']:>9.0f} {r['cpu_s_per_1000']:>10.2f} {ratio}")
    print("(stoker x: stoker.torch's samples/s over the row's; CPU x: its CPU-s per sample "
          "over the row's)")
    print(f"stoker.torch against the best DataLoader ({best['name']}): "
          f"{out['speedup_vs_best']:.2f}x the samples/s at {out['cpu_ratio_vs_best']:.2f}x the "
          f"CPU per sample; " + "; ".join(
              f"against {ANCHORS[lib][0]}: {out[f'speedup_vs_{lib}']:.2f}x at "
              f"{out[f'cpu_ratio_vs_{lib}']:.2f}x" for lib in ANCHORS if f"speedup_vs_{lib}" in out))
    print(f"P1 goal (>= 3x the best DataLoader at <= 1/3 its CPU per sample; >= DALI's and "
          f"SPDL's samples/s at no more CPU per sample): {'met' if out['goal_met'] else 'not met'}"
          "\n", flush=True)
    return out


# ---- P2 ---------------------------------------------------------------------

def p2(src, epochs, rounds=3):
    """Medians of `rounds` interleaved rounds (the C loader, then Python),
    the files read whole before every run and the disk reads (pgpgin)
    recorded beside; samples/s and CPU-s per 1000 samples of each side.
    The ratio is over the same timed region on both sides, the loader's
    own (from its open to the last batch, as `stoker feed` reports it); the
    Python wall clock with the dataset's open is recorded beside."""
    files = files_of(src)
    rows, n = [], 0
    for _ in range(rounds):
        warm(files)
        p0, c0 = pgpgin_kib(), cpu_s()
        out = subprocess.run([STK, "feed", src, "--batch", "64", "--epochs", str(epochs), "--json",
                              "-q"], check=True, capture_output=True, text=True).stdout
        rep = json.loads(out)
        c_cpu, c_disk = cpu_s() - c0, pgpgin_kib() - p0
        warm(files)
        p0, c0 = pgpgin_kib(), cpu_s(children=False)
        t0, n, touched = time.perf_counter(), 0, 0
        with stoker.Loader(src, 64, epochs=epochs) as ld:
            engine = ld.engine
            for b in ld:
                t = torch.from_dlpack(b.data)
                touched += int(t[::4096].sum())  # one byte of every page
                n += len(b)
                del t, b
            py_rate = ld.stats()["samples_per_s"]
        py_wall = n / (time.perf_counter() - t0)
        c_rate = rep["stats"]["samples_per_s"]
        rows.append({"c_samples_per_s": c_rate, "py_samples_per_s": py_rate,
                     "ratio": py_rate / c_rate, "py_wall_samples_per_s": py_wall,
                     "ratio_py_wall_with_open": py_wall / c_rate,
                     "c_cpu_s_per_1000": 1000 * c_cpu / rep["stats"]["samples"],
                     "py_cpu_s_per_1000": 1000 * (cpu_s(children=False) - c0) / n,
                     "c_disk_read_kib": c_disk, "py_disk_read_kib": pgpgin_kib() - p0,
                     "load": loadavg(), "c_engine": rep["engine"], "py_engine": engine})
    res = {k: statistics.median(r[k] for r in rows) for k in rows[0]
           if isinstance(rows[0][k], float) or isinstance(rows[0][k], int)}
    res.update(samples=n, rounds=rows, target=0.9)
    return res


# ---- P3 ---------------------------------------------------------------------

def small_cnn():
    import torch.nn as nn
    # Small enough that a CPU step (tens of ms) is in the range where the
    # input pipeline decides the step time, as a GPU step would be.
    return nn.Sequential(nn.AvgPool2d(4), nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def train_loop(batches, steps):
    torch.manual_seed(0)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    wait = step = 0.0
    it = iter(batches)
    x, y = next(it)  # the first batch (start-up) is not counted
    for _ in range(steps):
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(batches)
            x, y = next(it)
        t1 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x.float().div_(255)), y.long() % 10)
        opt.zero_grad()
        loss.backward()
        opt.step()
        wait += t1 - t0
        step += time.perf_counter() - t1
    del it
    return {"steps": steps, "wait_share": wait / (wait + step), "step_s": (wait + step) / steps}


def p3(root, steps, workers):
    import torchvision.datasets as tvd
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    dl = torch.utils.data.DataLoader(tvd.ImageFolder(root, transform=tf), batch_size=64,
                                     shuffle=True, num_workers=workers, drop_last=True)
    out = {"dataloader": train_loop(dl, steps)}
    out["dataloader"]["num_workers"] = workers
    ds = st.loader(root, 64, decode="jpeg", layout="chw", format="files", seed=1, drop_last=True,
                   rank=0, world_size=1)
    r = train_loop(ds, steps)
    s = ds.stats()
    r["stoker_stats_wait_share"] = s["consumer_wait_s"] / max(s["wall_s"], 1e-9)
    r["verdict"] = stoker.format_report(s)[1]
    out["stoker"] = r
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=int(os.environ.get("SAMPLES", "0")),
                    help="P1's samples a run (0: every image once, rounded up to a batch)")
    ap.add_argument("--p1-images", type=int, default=3000,
                    help="P1's JPEGs, cut from photographs (bench/photos.py)")
    ap.add_argument("--workers", default="0,1,2,3", help="P1's DataLoader num_workers settings")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="P1,P2,P3,P4,P5")
    ap.add_argument("--anchors", default="dali,spdl",
                    help="P1's anchors to run, of dali, dali_plain, spdl ('' for none)")
    ap.add_argument("--anchor-threads", default=",".join(str(t) for t in range(1, NCORES + 1)),
                    help="the thread counts each anchor is swept over (best kept)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="P1's, P2's and P4's interleaved rounds (medians kept)")
    ap.add_argument("--p4-samples", type=int, default=2048, help="P4's samples (one epoch a run)")
    ap.add_argument("--p4-threads", default="1,2",
                    help="stoker.torch transform_threads settings for P4 (best kept)")
    ap.add_argument("--p4-images", default="c",
                    help="where P4's stoker rows decode the jpg: c (the loader's threads), "
                         "python (torchvision in Python, as before image_fields), or c,python")
    ap.add_argument("--p4-workers", default="0,1,2,3",
                    help="DataLoader num_workers settings for P4's webdataset rows (best kept)")
    ap.add_argument("--p4-image", default="torchrgb8,tv",
                    help="webdataset's image decoders for P4: torchrgb8 (its own, PIL), tv "
                         "(torchvision.io, as stoker's)")
    ap.add_argument("--p5-files", type=int, default=128000,
                    help="P5's class-folder files (1000 folders; 1280000 is ImageNet's count)")
    a = ap.parse_args()
    res = {"load_before": loadavg(), "cores": NCORES, "torch": torch.__version__}
    if "P4" in a.only:
        why = anchors_status().get("webdataset", "ok")
        py = os.path.join(ANCHORS_VENV, "bin", "python")
        if not os.path.exists(py):
            why = "not installed: no .venv-anchors (bench/anchors-setup makes it)"
        res["P4"] = p45.p4(a, py, None if why == "ok" else why)
    if "P5" in a.only:
        res["P5"] = p45.p5(a.p5_files, a.rounds)
    if "P1" in a.only:
        res["P1"] = p1(a)
    if "P2" in a.only:
        raw = dataset("stoker-bench-p2", samples=1536, format="tfrecord", size=128 << 10,
                      samples_per_shard=256, seed=2)
        res["P2"] = p2(raw, 3, a.rounds)
        r = res["P2"]
        print(f"P2 raw 128 KiB, medians of {a.rounds} rounds: C loader {r['c_samples_per_s']:.0f} "
              f"samples/s ({r['c_cpu_s_per_1000']:.3f} CPU-s/1000), Python {r['py_samples_per_s']:.0f} "
              f"({r['py_cpu_s_per_1000']:.3f}): ratio {r['ratio']:.2f} [>= 0.9] (Python's wall clock "
              f"with the dataset's open: {r['ratio_py_wall_with_open']:.2f}); disk reads "
              f"{r['c_disk_read_kib']:.0f} / {r['py_disk_read_kib']:.0f} KiB; loads "
              f"{', '.join(x['load'] for x in r['rounds'])}", flush=True)
    if "P3" in a.only:
        jpegs = dataset("stoker-bench-p1", samples=2048, format="files",
                        jpeg=(400, 300, 500, 400), classes=10, seed=1)
        warm(files_of(jpegs))
        res["P3"] = p3(jpegs, a.steps, 2)
        for k, v in res["P3"].items():
            extra = (f", stoker's own stats: {v['stoker_stats_wait_share'] * 100:.1f}% waiting"
                     if k == "stoker" else f" (num_workers={v['num_workers']})")
            print(f"P3 {k}: {v['step_s'] * 1000:.0f} ms/step, wall-clock split: "
                  f"{v['wait_share'] * 100:.1f}% waiting for input{extra}", flush=True)
        print(f"P3 stoker verdict: {res['P3']['stoker']['verdict']}")
    finish(res)


def finish(res):
    res["load_after"] = loadavg()
    print(f"load average before/after: {res['load_before']} / {res['load_after']} on {NCORES} cores")
    os.makedirs("bench/results", exist_ok=True)
    only = "-".join(k for k in ("P1", "P2", "P3", "P4", "P5") if k in res)
    name = "python" if only == "P1-P2-P3" or "P1" in only else f"python-{only}"
    with open(f"bench/results/{name}.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
