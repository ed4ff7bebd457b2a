#!/usr/bin/env python3
"""K5: stoker bench's checkpoint emulation side by side with DLIO's.

The same scaled YAML goes to both tools (llama_7b with 4 layers of hidden
size 1024, about 1.5 GiB per checkpoint; unet3d on 8 small files with a
499 MB model saved after each epoch), in the same folder on the same disk,
in alternated rounds (DLIO, then stoker); medians over the rounds. Bytes per
checkpoint: the files DLIO left in one checkpoint folder, and stoker's
`checkpoints.bytes`. Bandwidth: DLIO's "Checkpoint save/load I/O
Throughput" (its GB is 2^30 bytes) and stoker's save_gib_s / load_gib_s.
fsync is off in the configs: DLIO's writer never fsyncs (docs/bench.md).
Both write through the page cache (stoker without --direct) and load the
checkpoints they wrote moments before; each round prints the memory
available before the run and the share of the run's checkpoint files
resident in the page cache after it (fincore), so the cache's part in the
load figures is on record. Where they differ: DLIO's figures time
torch.save (pickling, the zip writer's CRC32 per record) and torch.load
(new tensors allocated and filled), stoker's the writes and reads of its
buffers alone.

DLIO runs from a separate venv (DLIO_VENV, default /tmp/dlio-venv), never
from this repository. Making it (PyPI's dlio-benchmark 2.0.0 predates the
llama configs and transformer checkpoints, and its nvidia-dali dependency
downloads from pypi.nvidia.com): see docs/bench.md, "K5".
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data", "dlio-configs")

LLAMA_SUBS = [("name: llama_7b", "name: llama_7b_small"), ("num_layers: 32", "num_layers: 4"),
              ("hidden_size: 4096", "hidden_size: 1024"), ("ffn_hidden_size: 11008", "ffn_hidden_size: 2752"),
              ("num_attention_heads: 32", "num_attention_heads: 8"), ("num_kv_heads: 32", "num_kv_heads: 8"),
              ("time_between_checkpoints: 5", "time_between_checkpoints: 0.1"),
              ("num_checkpoints_write: 10", "num_checkpoints_write: 3"),
              ("num_checkpoints_read: 10", "num_checkpoints_read: 3"), ("fsync: True", "fsync: False")]

UNET = """model:
  name: unet3d_small
  type: cnn
  model_size_bytes: 499153191
framework: pytorch
workflow: {generate_data: False, train: True, checkpoint: True}
dataset:
  data_folder: %(work)s/unet3d_data
  format: npz
  num_files_train: 8
  num_samples_per_file: 1
  record_length_bytes: 4194304
  record_length_bytes_stdev: 0
  record_length_bytes_resize: 2097152
reader: {data_loader: pytorch, batch_size: 2, read_threads: 1, file_shuffle: seed, sample_shuffle: seed}
train: {epochs: 2, computation_time: 0.05}
checkpoint:
  checkpoint_folder: %(work)s/ck
  checkpoint_after_epoch: 1
  epochs_between_checkpoints: 1
metric: {au: 0.90}
"""


def sh(cmd, log, cwd):
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
    if rc:
        sys.exit("%s failed (exit %d): see %s" % (cmd[0], rc, log))
    return open(log).read()


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(d) for f in fs)


def mem_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) << 10
    return None


def resident(d):
    """The share of the bytes of the files under d in the page cache."""
    files = [os.path.join(p, f) for p, _, fs in os.walk(d) for f in fs]
    if not files:
        return None
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "RES,SIZE"] + files,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    res = size = 0
    for line in out.splitlines():
        r, z = line.split()
        res, size = res + int(r), size + int(z)
    return round(res / size, 3) if size else None


def dlio_run(venv, work, name, rnd):
    shutil.rmtree(os.path.join(work, "ck"), ignore_errors=True)
    avail = mem_available()
    out = os.path.join(work, "dlio-out-%s-%d" % (name, rnd))
    log = sh([os.path.join(venv, "bin", "dlio_benchmark"), "--config-dir", os.path.join(work, "cfg"),
              "workload=" + name, "++hydra.run.dir=" + out, "++workload.output.folder=" + out],
             out + ".log", work)
    def m(k):  # the averaged metric (checkpoint-only runs), else the median of each save's line
        x = re.search(r"Checkpoint %s I/O Throughput \(GB/second\): ([0-9.]+)" % k, log)
        if x:
            return float(x.group(1))
        verb = "saving" if k == "save" else "loading"
        each = re.findall(r"Finished %s checkpoint .* Throughput: ([0-9.]+) GB/s" % verb, log)
        return statistics.median(float(v) for v in each) if each else None
    first = sorted(os.listdir(os.path.join(work, "ck")))[0]
    r = {"bytes": dir_bytes(os.path.join(work, "ck", first)), "save": m("save"),
         "mem_avail_gib": round(avail / 2**30, 1) if avail else None,
         "cached_after": resident(os.path.join(work, "ck"))}
    if m("load") is not None:
        r["load"] = m("load")
    au = re.search(r"Training Accelerator Utilization \[AU\] \(%\): ([0-9.]+)", log)
    if au:
        r["au"] = float(au.group(1)) / 100
    return r


def stoker_run(work, name, rnd):
    shutil.rmtree(os.path.join(work, "ck"), ignore_errors=True)
    avail = mem_available()
    js = os.path.join(work, "stoker-%s-%d.json" % (name, rnd))
    cfg = os.path.join(work, "cfg", "workload", name + ".yaml")
    data = []  # stoker reads DLIO's generated files (its train/ folder)
    if name.startswith("unet3d"):
        data = ["--data", os.path.join(work, "unet3d_data", "train")]
    # --keep-checkpoints: its files stay until the next run, as DLIO's do,
    # so that their page-cache residency can be read after the run
    sh([os.path.join(ROOT, "build", "stoker"), "bench", "--config", cfg, "-q", "--json", js,
        "--keep-checkpoints"] + data, js + ".log", work)
    rep = json.load(open(js))
    c = rep["checkpoints"]
    r = {"bytes": c["bytes"], "save": c["save_gib_s"], "fsync": c["fsync"],
         "direct": c["direct"], "mem_avail_gib": round(avail / 2**30, 1) if avail else None,
         "cached_after": resident(os.path.join(work, "ck"))}
    if not c["only"]:
        r["au"] = rep["au"]
    if c["loads"]:
        r["load"] = c["load_gib_s"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/stoker-k5", help="scratch folder (checkpoints, configs)")
    ap.add_argument("--only", choices=["llama_7b_small", "unet3d_small"])
    a = ap.parse_args()
    venv = os.environ.get("DLIO_VENV", "/tmp/dlio-venv")
    if not os.path.exists(os.path.join(venv, "bin", "dlio_benchmark")):
        # like an anchor that cannot run: one line saying why, and the
        # other benchmarks of `make bench` go on
        print("K5 not measured: no DLIO in %s (set DLIO_VENV; docs/bench.md, \"K5\", says how to "
              "make it)" % venv)
        return 0
    if not os.path.exists(os.path.join(ROOT, "build", "stoker")):
        sys.exit("build/stoker is missing: run make first")
    work = a.work
    os.makedirs(os.path.join(work, "cfg", "workload"), exist_ok=True)
    src = open(os.path.join(SHARED, "llama_7b.yaml")).read()
    for x, y in LLAMA_SUBS:
        src = src.replace(x, y)
    src = src.replace("checkpoints/llama_7b", os.path.join(work, "ck"))
    open(os.path.join(work, "cfg", "workload", "llama_7b_small.yaml"), "w").write(src)
    open(os.path.join(work, "cfg", "workload", "unet3d_small.yaml"), "w").write(UNET % {"work": work})
    names = [a.only] if a.only else ["llama_7b_small", "unet3d_small"]
    if "unet3d_small" in names and not os.path.isdir(os.path.join(work, "unet3d_data")):
        sh([os.path.join(venv, "bin", "dlio_benchmark"), "--config-dir", os.path.join(work, "cfg"),
            "workload=unet3d_small", "++workload.workflow.generate_data=True",
            "++workload.workflow.train=False", "++hydra.run.dir=" + os.path.join(work, "gen")],
           os.path.join(work, "gen.log"), work)
    print("load average before: %s" % open("/proc/loadavg").read().split()[:3])
    for name in names:
        res = {"dlio": [], "stoker": []}
        for rnd in range(a.rounds):
            res["dlio"].append(dlio_run(venv, work, name, rnd))
            res["stoker"].append(stoker_run(work, name, rnd))
            print("  %s round %d: dlio %s | stoker %s | load %s" % (
                name, rnd + 1, res["dlio"][-1], res["stoker"][-1], open("/proc/loadavg").read().split()[:3]))
            sys.stdout.flush()
        print("%s (medians of %d alternated rounds):" % (name, a.rounds))
        for k in ("bytes", "save", "load", "au"):
            if all(k in r for r in res["dlio"] + res["stoker"]):
                d = statistics.median(r[k] for r in res["dlio"])
                s = statistics.median(r[k] for r in res["stoker"])
                unit = {"bytes": "B per checkpoint", "au": "AU (checkpoints in it?)"}.get(k, "GiB/s " + k)
                print("  %-28s dlio %-16.4g stoker %-16.4g stoker/dlio %.3f" % (unit, d, s, s / d))
    shutil.rmtree(os.path.join(work, "ck"), ignore_errors=True)
    print("load average after: %s" % open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
