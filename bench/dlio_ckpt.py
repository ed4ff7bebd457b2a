#!/usr/bin/env python3
"""K5: stoker bench's checkpoint emulation side by side with DLIO's.

The same scaled YAML goes to both tools (llama_7b with 4 layers of hidden
size 1024, about 1.5 GiB per checkpoint; unet3d on 8 small files with a
499 MB model saved after each epoch), in the same folder on the same disk,
in alternated rounds (DLIO, then stoker's two checkpoint writers:
`--checkpoint-io tier`, its own writer, and `--checkpoint-io torch`, the
calls DLIO's PyTorch backend makes); medians over the rounds. K5 asks the
torch mode for DLIO's bandwidth within 10%; the tier column says what the
same storage does with a good writer. Bytes per
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
(new tensors allocated and filled); stoker's tier mode the writes and reads
of its buffers alone, its torch mode those of DLIO's calls (one per tensor,
each after its CRC32, into new memory on loads) without the pickling.

The storage part alone: with strace (on by default; --no-strace turns it
off) each tool runs under `strace -f -T -y` tracing only the file system
calls, and the write and read calls on the files under the checkpoint
folder are summed: bytes over the seconds spent inside those calls is each
tool's storage bandwidth, in the same units as its own figure, and the
tool's own checkpoint time minus that is the time it spent outside them
(for DLIO: torch.save's pickling and CRC32 per record, torch.load's new
tensors; for stoker: starting its threads, and the tracer's stops between
its calls). Both configs have one writing
rank, so one thread makes every call and the seconds add up. Each run
starts after a sync, so neither inherits the other's dirty pages; the
dirty bytes left before it are printed with the round.

Each run also starts --settle seconds (default 40) after the last run's
checkpoint files were deleted. On a VM whose balloon driver reports free
memory to its host (virtio free page reporting, 2 MiB blocks a couple of
seconds after they are freed; the header line says whether this kernel
does), the host drops the memory it is told of, and the guest's next touch
of it is several times slower (here a write() into the page cache ran at
0.25-0.34 GiB/s where it had run at 0.85-1.7 just after another process
freed the memory). A save in a training job lands on memory free long
since; DLIO starts 15 s after its launch, stoker in about 3, so without
the wait stoker's page-cache writes landed on the gigabytes the last run
had just freed and DLIO's did not. Reporting 4.5 GiB takes the kernel
longer than 10 s here: --settle-probe measures how long (1.0-1.6 GiB/s
10 s after the delete, 0.40-0.51 after 25 s and after 60 s), so the
default wait is 40 s, and every tool's saves start on reported memory.

--crc-split times torch.save's own work alone (llama_7b_small's state into
a writer that discards the bytes, with and without torch's CRC32 per
record), in DLIO's Python.

--py-write writes a 499,153,191-byte buffer (unet3d_small's model) twice
into the checkpoint folder with Python's open(name, "wb").write() in DLIO's
Python, once in a process that imported torch first and once in one that
did not, alternated with stoker's `--checkpoint-io torch` on the same
model size, and prints each one's bandwidth inside its write calls
(strace): whether the time DLIO spends inside write() is the storage's or
its process's.

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


# the file system calls strace follows; only those on the checkpoint files count
TRACED = "openat,close,write,pwrite64,writev,pwritev,pwritev2,read,pread64,readv,preadv,preadv2,fsync,fdatasync"
WRITES = {"write", "pwrite64", "writev", "pwritev", "pwritev2"}
READS = {"read", "pread64", "readv", "preadv", "preadv2"}
# `strace -f -T -y` lines: "PID call(FD<path>, ...) = RET <secs>", or a call
# cut in two by another thread's: "PID call(FD<path>, ... <unfinished ...>"
# then "PID <... call resumed>...) = RET <secs>"
WHOLE = re.compile(r"^(\d+)\s+(\w+)\((\d+)<([^>]*)>.*\)\s+=\s+(-?\d+)(?:\s.*)?\s<([0-9.]+)>$")
CUT = re.compile(r"^(\d+)\s+(\w+)\((\d+)<([^>]*)>.*<unfinished \.\.\.>$")
RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>.*\)\s+=\s+(-?\d+)(?:\s.*)?\s<([0-9.]+)>$")


def traced(cmd, trace):
    if not trace:
        return cmd
    return ["strace", "-f", "-qq", "-T", "-y", "-s", "0", "--seccomp-bpf", "-e", "trace=" + TRACED,
            "-o", trace] + cmd


def io_calls(trace, folder):
    """Bytes, seconds and calls of the writes, reads and fsyncs on files under folder."""
    tot = {k: [0, 0.0, 0] for k in ("write", "read", "fsync")}
    cut = {}
    pre = folder.rstrip("/") + "/"
    for line in open(trace, errors="replace"):
        line = line.rstrip("\n")
        m = WHOLE.match(line)
        if m:
            _, call, _, path, ret, secs = m.groups()
        else:
            c = CUT.match(line)
            if c:
                cut[c.group(1)] = (c.group(2), c.group(4))
                continue
            r = RESUMED.match(line)
            if not r or r.group(1) not in cut:
                continue
            call, path = cut.pop(r.group(1))
            ret, secs = r.group(3), r.group(4)
        if not path.startswith(pre):
            continue
        k = "write" if call in WRITES else "read" if call in READS else "fsync" if "sync" in call else None
        if k:
            t = tot[k]
            t[0] += max(int(ret), 0) if k != "fsync" else 0
            t[1] += float(secs)
            t[2] += 1
    return tot


def storage(r, tot, saves, save_s, loads, load_s):
    """Adds the storage part to a round's result r: GiB/s inside the write and
    read calls, and the seconds per checkpoint outside them."""
    w, rd, fs = tot["write"], tot["read"], tot["fsync"]
    if saves and w[1] > 0:
        r["save_calls"] = round(w[0] / w[1] / 2**30, 4)
        r["save_outside_s"] = round((save_s - w[1] - fs[1]) / saves, 3)
        r["writes_per_ckpt"] = w[2] // saves
        r["written_per_ckpt"] = w[0] // saves
    if fs[2]:
        r["fsync_s"] = round(fs[1] / saves, 3)
    if loads and rd[1] > 0:
        r["load_calls"] = round(rd[0] / rd[1] / 2**30, 4)
        r["load_outside_s"] = round((load_s - rd[1]) / loads, 3)
        r["read_per_ckpt"] = rd[0] // loads


def dirty():
    """Dirty and writeback bytes in the page cache, GiB."""
    kb = 0
    for line in open("/proc/meminfo"):
        if line.startswith(("Dirty:", "Writeback:")):
            kb += int(line.split()[1])
    return round(kb / 2**20, 2)


def layout(d):
    """The first checkpoint's files: name and size."""
    if not os.path.isdir(d) or not os.listdir(d):
        return []
    first = os.path.join(d, sorted(os.listdir(d))[0])
    return sorted((f, os.path.getsize(os.path.join(first, f))) for f in os.listdir(first))


# --crc-split: torch.save's own work on llama_7b_small's state (DLIO's
# shapes and types, random), into a writer that discards the bytes, with
# and without torch's CRC32 per record; run by DLIO's Python
CRC_SPLIT = r"""
import io, statistics, sys, time, torch, torch.serialization as ser
h, ffn, v, L = 1024, 2752, 32000, 4
layer = [h, h * 3 * h, h * h, h, 2 * h * ffn, h * ffn]
params = 2 * v * h + sum(layer) * L + h
st = {"0": {"0": torch.rand(h * v, dtype=torch.float16)}}
for i in range(1, L + 1):
    st[str(i)] = {str(j): torch.rand(n, dtype=torch.float16) for j, n in enumerate(layer)}
st[str(L + 1)] = {"0": torch.rand(h * v, dtype=torch.float16)}
st[str(L + 2)] = {"0": torch.rand(h, dtype=torch.float16)}
opt = {str(i): torch.rand(n, dtype=torch.float32) for i, n in enumerate([params, 5 * h] * 3)}
class Null(io.RawIOBase):
    def writable(self): return True
    def write(self, b): return memoryview(b).nbytes
size = sum(t.nbytes for d in st.values() for t in d.values()) + sum(t.nbytes for t in opt.values())
res = {True: [], False: []}
for r in range(int(sys.argv[1])):
    for crc in (True, False):
        ser.set_crc32_options(crc)
        t0 = time.perf_counter(); torch.save(st, Null()); torch.save(opt, Null())
        res[crc].append(time.perf_counter() - t0)
for crc in (True, False):
    print("  torch.save of %d B, no I/O, CRC32 %-5s: %.3f s per checkpoint (median of %d: %s)" % (
        size, "on" if crc else "off", statistics.median(res[crc]), len(res[crc]),
        ", ".join("%.3f" % x for x in res[crc])))
"""


# --py-write: one buffer of unet3d_small's model size written twice through
# Python's file object, after `import torch` or not (argv: folder, torch|plain)
PY_WRITE = r"""
import os, sys, time, zlib
if sys.argv[2] == "torch":
    import torch
b = bytearray(os.urandom(499153191))
os.makedirs(sys.argv[1], exist_ok=True)
for i in range(2):
    time.sleep(0.1)
    zlib.crc32(b)
    with open(os.path.join(sys.argv[1], "model_states-%d.pt" % i), "wb") as f:
        f.write(b)
"""

PY_WRITE_CFG = """model: {name: py_write, type: cnn, model_size_bytes: 499153191}
framework: pytorch
workflow: {generate_data: False, train: False, checkpoint: True}
checkpoint: {checkpoint_folder: %(work)s/ck, time_between_checkpoints: 0.1, num_checkpoints_write: 2,
             num_checkpoints_read: 0}
"""


def py_write(venv, work, rounds):
    cfg = os.path.join(work, "py_write.yaml")
    open(cfg, "w").write(PY_WRITE_CFG % {"work": work})
    ck, tr = os.path.join(work, "ck"), os.path.join(work, "py_write.strace")
    cmds = [("python, import torch", [os.path.join(venv, "bin", "python"), "-c", PY_WRITE, ck, "torch"]),
            ("python, no torch", [os.path.join(venv, "bin", "python"), "-c", PY_WRITE, ck, "plain"]),
            ("stoker --checkpoint-io torch", [os.path.join(ROOT, "build", "stoker"), "bench", "--config", cfg,
                                              "-q", "--checkpoint-io", "torch"])]
    res = {k: [] for k, _ in cmds}
    for rnd in range(rounds):
        for k, cmd in cmds:
            fresh(ck)
            sh(traced(cmd, tr), tr + ".log", work)
            w = io_calls(tr, ck)["write"]
            res[k].append(w[0] / w[1] / 2**30 if w[1] > 0 else float("nan"))
            os.unlink(tr)
        print("  round %d: %s | load %s" % (rnd + 1, ", ".join("%s %.3f" % (k, v[-1]) for k, v in res.items()),
                                           open("/proc/loadavg").read().split()[:3]))
        sys.stdout.flush()
    shutil.rmtree(ck, ignore_errors=True)
    print("GiB/s inside the write calls, 2 x 499,153,191 B into the page cache (medians of %d rounds):" % rounds)
    for k, v in res.items():
        print("  %-30s %.3f" % (k, statistics.median(v)))


SETTLE = 40.0  # seconds, --settle


def reporting():
    """Whether this kernel hands free memory back to its host (virtio-balloon
    free page reporting), and in blocks of which order."""
    try:
        order = int(open("/sys/module/page_reporting/parameters/page_reporting_order").read())
    except (OSError, ValueError):
        return None
    for d in os.listdir("/sys/bus/virtio/devices") if os.path.isdir("/sys/bus/virtio/devices") else []:
        try:
            dev = open("/sys/bus/virtio/devices/%s/device" % d).read().strip()
            feat = open("/sys/bus/virtio/devices/%s/features" % d).read().strip()
        except OSError:
            continue
        if dev == "0x0005" and len(feat) > 5 and feat[5] == "1":  # balloon, VIRTIO_BALLOON_F_REPORTING
            return order
    return None


def settle_probe(work, rounds, waits=(10, 25, 40, 60)):
    """--settle-probe: how long after a run's files are deleted a page-cache
    write stops being fast. Each trial writes 4.5 GiB of new files (what
    llama_7b_small's three checkpoints leave), syncs, deletes them, waits T
    seconds, then times the write() calls of 1.5 GiB (one checkpoint) into a
    new file; the waits alternate within each round. A wait after which the
    figure no longer falls is one at which every tool's saves land on
    memory the host has been told of, as a running job's do."""
    os.makedirs(work, exist_ok=True)
    chunk = 64 << 20
    src = bytearray(os.urandom(chunk)) * 24          # 1.5 GiB, every page touched
    mv = memoryview(src)

    def write(path):  # the whole source, 64 MiB a call; the seconds inside write()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        inside = 0.0
        try:
            o = 0
            while o < len(src):
                t = time.perf_counter()
                o += os.write(fd, mv[o:o + chunk])  # a short write goes on from where it stopped
                inside += time.perf_counter() - t
        finally:
            os.close(fd)
        return inside

    names = [os.path.join(work, "probe-big-%d" % i) for i in range(3)] + [os.path.join(work, "probe")]
    res = {t: [] for t in waits}
    try:
        for rnd in range(rounds):
            for t in waits:
                for f in names[:3]:
                    write(f)
                os.sync()
                for f in names[:3]:
                    os.unlink(f)
                time.sleep(t)
                s = write(names[3])
                os.unlink(names[3])
                os.sync()
                res[t].append(len(src) / 2**30 / s)
                print("  round %d: %2d s after deleting 4.5 GiB, 1.5 GiB written at %.3f GiB/s inside "
                      "write() | load %s" % (rnd + 1, t, res[t][-1], open("/proc/loadavg").read().split()[:3]))
                sys.stdout.flush()
    finally:  # interrupted or a full disk: nothing of the probe's 6 GiB left behind
        for f in names:
            if os.path.exists(f):
                os.unlink(f)
    for t in waits:
        print("  %2d s: median %.3f GiB/s (%s)" % (t, statistics.median(res[t]),
                                                 ", ".join("%.3f" % v for v in res[t])))


def fresh(ck):
    """Each tool's run starts from the same memory: the last run's
    checkpoint files deleted, the dirty pages synced, then SETTLE seconds
    so that the memory those files held is free long enough for the kernel
    to report it to the host, as memory freed long before a save is (see
    the module's docstring)."""
    shutil.rmtree(ck, ignore_errors=True)
    os.sync()
    time.sleep(SETTLE)


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


def dlio_run(venv, work, name, rnd, trace):
    fresh(os.path.join(work, "ck"))
    avail, dirt = mem_available(), dirty()
    out = os.path.join(work, "dlio-out-%s-%d" % (name, rnd))
    tr = out + ".strace" if trace else None
    log = sh(traced([os.path.join(venv, "bin", "dlio_benchmark"), "--config-dir", os.path.join(work, "cfg"),
                     "workload=" + name, "++hydra.run.dir=" + out, "++workload.output.folder=" + out], tr),
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
         "mem_avail_gib": round(avail / 2**30, 1) if avail else None, "dirty_before_gib": dirt,
         "cached_after": resident(os.path.join(work, "ck")), "files": layout(os.path.join(work, "ck"))}
    if m("load") is not None:
        r["load"] = m("load")
    au = re.search(r"Training Accelerator Utilization \[AU\] \(%\): ([0-9.]+)", log)
    if au:
        r["au"] = float(au.group(1)) / 100
    if tr:  # DLIO's own time per save and load: its "Finished saving/loading" lines
        saves = [float(v) for v in re.findall(r"Finished saving checkpoint .* in ([0-9.]+) s;", log)]
        loads = [float(v) for v in re.findall(r"Finished loading checkpoint .* in ([0-9.]+) s;", log)]
        storage(r, io_calls(tr, os.path.join(work, "ck")), len(saves), sum(saves), len(loads), sum(loads))
        os.unlink(tr)
    return r


def stoker_run(work, name, rnd, trace, io):
    fresh(os.path.join(work, "ck"))
    avail, dirt = mem_available(), dirty()
    js = os.path.join(work, "stoker-%s-%s-%d.json" % (io, name, rnd))
    cfg = os.path.join(work, "cfg", "workload", name + ".yaml")
    data = []  # stoker reads DLIO's generated files (its train/ folder)
    if name.startswith("unet3d"):
        data = ["--data", os.path.join(work, "unet3d_data", "train")]
    # --keep-checkpoints: its files stay until the next run, as DLIO's do,
    # so that their page-cache residency can be read after the run
    tr = js + ".strace" if trace else None
    sh(traced([os.path.join(ROOT, "build", "stoker"), "bench", "--config", cfg, "-q", "--json", js,
               "--keep-checkpoints", "--checkpoint-io", io] + data, tr), js + ".log", work)
    rep = json.load(open(js))
    c = rep["checkpoints"]
    r = {"bytes": c["bytes"], "save": c["save_gib_s"], "fsync": c["fsync"],
         "direct": c["direct"], "mem_avail_gib": round(avail / 2**30, 1) if avail else None,
         "dirty_before_gib": dirt, "cached_after": resident(os.path.join(work, "ck")),
         "files": layout(os.path.join(work, "ck"))}
    if not c["only"]:
        r["au"] = rep["au"]
    if c["loads"]:
        r["load"] = c["load_gib_s"]
    if tr:
        storage(r, io_calls(tr, os.path.join(work, "ck")), c["saves"], c["save_s"], c["loads"], c["load_s"])
        os.unlink(tr)
    return r


def main():
    global SETTLE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/stoker-k5", help="scratch folder (checkpoints, configs)")
    ap.add_argument("--only", choices=["llama_7b_small", "unet3d_small"])
    ap.add_argument("--crc-split", action="store_true",
                    help="only time torch.save's own work on llama_7b_small's state, with and without CRC32")
    ap.add_argument("--py-write", action="store_true",
                    help="only time Python's write() of a 499 MB buffer with and without torch imported, "
                         "beside stoker's torch mode")
    ap.add_argument("--settle", type=float, default=SETTLE,
                    help="seconds between deleting the last run's checkpoints and starting the next "
                         "tool (default %(default)s; see the docstring)")
    ap.add_argument("--settle-probe", action="store_true",
                    help="only measure page-cache writes 10, 25, 40 and 60 s after deleting 4.5 GiB "
                         "(how long --settle must be on this machine)")
    ap.add_argument("--no-strace", action="store_true",
                    help="run both tools untraced (their own figures only, no storage part)")
    a = ap.parse_args()
    SETTLE = a.settle
    if a.settle_probe:  # needs neither DLIO nor stoker
        order = reporting()
        print("load average before: %s; free page reporting to the host: %s" % (
            open("/proc/loadavg").read().split()[:3],
            "on, blocks of order %d" % order if order is not None else "off"))
        settle_probe(a.work, a.rounds)
        return 0
    venv = os.environ.get("DLIO_VENV", "/tmp/dlio-venv")
    if not os.path.exists(os.path.join(venv, "bin", "dlio_benchmark")):
        # like an anchor that cannot run: one line saying why, and the
        # other benchmarks of `make bench` go on
        print("K5 not measured: no DLIO in %s (set DLIO_VENV; docs/bench.md, \"K5\", says how to "
              "make it)" % venv)
        return 0
    if a.crc_split:
        print("load average before: %s" % open("/proc/loadavg").read().split()[:3])
        sys.stdout.flush()
        subprocess.check_call([os.path.join(venv, "bin", "python"), "-c", CRC_SPLIT, str(a.rounds)])
        print("load average after: %s" % open("/proc/loadavg").read().split()[:3])
        return 0
    if not os.path.exists(os.path.join(ROOT, "build", "stoker")):
        sys.exit("build/stoker is missing: run make first")
    trace = not a.no_strace
    if (trace or a.py_write) and not shutil.which("strace"):
        sys.exit("strace is missing (scripts/install-deps bench installs it), or give --no-strace")
    work = a.work
    if a.py_write:
        os.makedirs(work, exist_ok=True)
        print("load average before: %s" % open("/proc/loadavg").read().split()[:3])
        py_write(venv, work, a.rounds)
        return 0
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
    order = reporting()
    print("load average before: %s; strace %s; free page reporting to the host: %s; %g s settle "
          "before each run" % (open("/proc/loadavg").read().split()[:3], "on (both tools)" if trace else "off",
                               "on, blocks of order %d" % order if order is not None else "off", SETTLE))
    rows = [("bytes", "B per checkpoint"), ("written_per_ckpt", "B written per checkpoint"),
            ("save", "save GiB/s, as reported"), ("save_calls", "save GiB/s in write calls"),
            ("save_outside_s", "save s/ckpt outside them"), ("fsync_s", "fsync s per checkpoint"),
            ("writes_per_ckpt", "write calls per checkpoint"), ("load", "load GiB/s, as reported"),
            ("load_calls", "load GiB/s in read calls"), ("load_outside_s", "load s/ckpt outside them"),
            ("au", "AU (checkpoints in it?)")]
    tools = ("dlio", "tier", "torch")  # the columns: DLIO, stoker's two --checkpoint-io modes
    for name in names:
        res = {t: [] for t in tools}
        for rnd in range(a.rounds):
            res["dlio"].append(dlio_run(venv, work, name, rnd, trace))
            res["tier"].append(stoker_run(work, name, rnd, trace, "tier"))
            res["torch"].append(stoker_run(work, name, rnd, trace, "torch"))
            if rnd == 0:  # the layout is the same every round
                for tool in tools:
                    print("  %s files of one checkpoint, %s: %s" % (name, tool, res[tool][0]["files"]))
            for tool in tools:
                res[tool][-1].pop("files")
            print("  %s round %d: %s | load %s" % (name, rnd + 1, " | ".join(
                "%s %s" % (t, res[t][-1]) for t in tools), open("/proc/loadavg").read().split()[:3]))
            sys.stdout.flush()
        print("%s (medians of %d alternated rounds; strace %s; stoker tier and torch are "
              "--checkpoint-io):" % (name, a.rounds, "on" if trace else "off"))
        med = {}
        for k, unit in rows:
            if all(k in r for r in res["dlio"] + res["tier"] + res["torch"]):
                m = med[k] = {t: statistics.median(r[k] for r in res[t]) for t in tools}
                d = m["dlio"]
                print("  %-28s dlio %-12.4g tier %-12.4g torch %-12.4g tier/dlio %s torch/dlio %s" % (
                    unit, d, m["tier"], m["torch"], "%.3f" % (m["tier"] / d) if d else "-",
                    "%.3f" % (m["torch"] / d) if d else "-"))
        for k in ("save", "load"):
            if k in med and med[k]["dlio"]:
                # the rounds' own ratios: each pairs runs made minutes apart,
                # where the ratio of the two medians may pair different rounds
                q = statistics.median(t[k] / d[k] for d, t in zip(res["dlio"], res["torch"]))
                print("  K5 %s bandwidth, torch mode against DLIO: %.3f (median of the rounds' "
                      "ratios %s), %s 10%%" % (
                          k, q, ", ".join("%.2f" % (t[k] / d[k]) for d, t in zip(res["dlio"], res["torch"])),
                          "within" if abs(q - 1) <= 0.10 else "NOT within"))
    shutil.rmtree(os.path.join(work, "ck"), ignore_errors=True)
    print("load average after: %s" % open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
