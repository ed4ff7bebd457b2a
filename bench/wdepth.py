"""Durable write bandwidth against queue depth (issue 20, K1): fio writing
SIZE into a fresh file (and, --ow-depths, over a written one) (O_DIRECT, io_uring, --end_fsync=1, so its runtime
includes the flush) at depths 1..32 with 8 MiB and 2 MiB blocks, and the
checkpoint tier's save of the same bytes (build/bench/ckpt DIR SIZE 4 4,
fsync on), interleaved in rounds, the 1-minute load average beside each.

    python3 bench/wdepth.py [--dir DIR] [--size 1GiB] [--rounds 3]
        [--depths 1,4,8,16,32] [--bs 8M,2M] [--ckpt build/bench/ckpt ...]

Every --ckpt binary runs once a round (old and new builds side by side).
The file system is synced (untimed) before each point, so none pays for
the discards of the file the previous one removed (ext4 -o discard).
Figures are this disk's at this moment: the disk is shared."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def settle(d):
    for f in os.listdir(d):
        p = os.path.join(d, f)
        shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    os.sync()


def fio(d, bs, depth, size, overwrite=False):
    if overwrite:  # written once first (untimed): the timed run overwrites written blocks
        fio(d, "8M", 32, size)
        os.sync()
    cmd = ["fio", "--name=wd", f"--directory={d}", "--rw=write", f"--bs={bs}", "--direct=1",
           "--ioengine=io_uring", f"--iodepth={depth}", f"--size={size}", "--end_fsync=1",
           "--output-format=json"]
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return r["jobs"][0]["write"]["bw_bytes"] / GiB


def save(binary, d, size):
    out = subprocess.run([binary, os.path.join(d, "ck"), str(size), "4", "4"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["save_gib_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--depths", default="1,4,8,16,32")
    ap.add_argument("--bs", default="8M,2M")
    ap.add_argument("--ow-depths", default="32", help="depths (8 MiB) overwriting a written file")
    ap.add_argument("--ckpt", nargs="*", default=[os.path.join(ROOT, "build", "bench", "ckpt")])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    size = a.size.lower().replace("ib", "").replace("b", "")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    nbytes = int(float(size[:-1]) * mult[size[-1]]) if size[-1] in mult else int(size)
    work = tempfile.mkdtemp(prefix="wdepth-", dir=a.dir)
    points = {}
    try:
        for r in range(a.rounds):
            for bs in a.bs.split(","):
                for depth in (int(x) for x in a.depths.split(",")):
                    settle(work)
                    bw = fio(work, bs, depth, nbytes)
                    key = f"fio bs {bs} depth {depth}"
                    points.setdefault(key, []).append((bw, load()))
                    print(f"round {r + 1} {key:24}: {bw:.3f} GiB/s (load {load():.1f})", flush=True)
            for depth in (int(x) for x in a.ow_depths.split(",") if x):
                settle(work)
                bw = fio(work, "8M", depth, nbytes, overwrite=True)
                key = f"fio overwrite bs 8M depth {depth}"
                points.setdefault(key, []).append((bw, load()))
                print(f"round {r + 1} {key:24}: {bw:.3f} GiB/s (load {load():.1f})", flush=True)
            for b in a.ckpt:
                settle(work)
                bw = save(b, work, nbytes)
                key = f"save {os.path.relpath(b, ROOT)}"
                points.setdefault(key, []).append((bw, load()))
                print(f"round {r + 1} {key:24}: {bw:.3f} GiB/s (load {load():.1f})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("median over rounds (min-max), load range:")
    for k, v in points.items():
        bws = [x[0] for x in v]
        ls = [x[1] for x in v]
        print(f"  {k:28}: {statistics.median(bws):.3f} ({min(bws):.3f}-{max(bws):.3f}) "
              f"load {min(ls):.1f}-{max(ls):.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(points, f, indent=1)


if __name__ == "__main__":
    main()
