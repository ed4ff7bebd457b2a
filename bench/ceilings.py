"""Device ceilings side by side (issue 20 §4, K1): `stoker doctor`'s
O_DIRECT sequential read and write figures against fio's curve over queue
depth (1..32) and jobs (1, 2) with 8 MiB blocks and io_uring on the same
directory, then K1: the checkpoint tier's save bandwidth (build/bench/ckpt,
fsync on) over doctor's sequential write ceiling and over the curve's best.
K1 runs in --rounds rounds, each a fresh `doctor --only seq_write` and a
save back to back, and its figure is the median of the rounds' ratios: on a
shared disk two measurements minutes apart differ by more than K1's margin.
The file system is synced before each measurement (untimed), so none pays
for the discards of files an earlier one removed (ext4 -o discard).

    bench/ceilings.sh [--dir DIR] [--size 1GiB] [--runtime 4] [--rounds 3] [--k1-only] [--json FILE]
--k1-only runs the K1 rounds alone (no fio, no read ceiling), so more
rounds fit in the same minutes; odd rounds save first.

The 1-minute load average is printed beside each figure (and kept in the
JSON): the disk and cores may be shared. Needs build/stoker and build/bench/ckpt (make; make build/bench/ckpt) and
fio (scripts/install-deps bench). Prints one table and, with --json, every
figure. Figures are of this machine and this moment only: the disk under
test is shared with whatever else runs."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30


def size_bytes(s):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = s.strip().lower().rstrip("b").rstrip("i")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def doctor(stoker, d, size):
    out = subprocess.run([stoker, "doctor", "--dir", d, "--size", str(size), "--only",
                          "seq_write,seq_read", "--json", "-"], capture_output=True, text=True,
                         check=True).stdout
    doc = json.loads(out)
    figs = {k: doc["figures"][k]["value"] for k in ("seq_write", "seq_read")}
    methods = {k: doc["figures"][k].get("method") for k in ("seq_write", "seq_read")}
    methods["curve"] = doc.get("seq_curve", [])
    return figs, methods


def fio(d, rw, depth, jobs, size, runtime):
    cmd = ["fio", "--name=ceil", f"--directory={d}", f"--rw={rw}", "--bs=8M", "--direct=1",
           "--ioengine=io_uring", f"--iodepth={depth}", f"--numjobs={jobs}", f"--size={size}",
           "--time_based", f"--runtime={runtime}", "--group_reporting", "--output-format=json"]
    if rw == "write":
        cmd.append("--end_fsync=1")
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    job = r["jobs"][0]
    return job["read" if rw == "read" else "write"]["bw_bytes"]


def load():
    """The 1-minute load average (the disk and cores are shared: say it
    beside every figure)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def seq_write(stoker, d, size):
    """doctor's seq_write ceiling alone, and the median of its curve's
    points (context: the ceiling is the best point)."""
    out = subprocess.run([stoker, "doctor", "--dir", d, "--size", str(size), "--only", "seq_write",
                          "--json", "-"], capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    pts = sorted(p["bytes_per_s"] for p in doc.get("seq_curve", []) if p["rw"] == "write")
    return doc["figures"]["seq_write"]["value"], (pts[len(pts) // 2] if pts else None)


def ckpt_save(bench, d, size):
    out = subprocess.run([bench, d, str(size), "4", "4"], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="directory on the disk under test (default: a "
                    "temporary one under build/)")
    ap.add_argument("--size", default="1GiB", help="scratch file size per job and checkpoint size")
    ap.add_argument("--runtime", type=int, default=4, help="seconds per fio point")
    ap.add_argument("--rounds", type=int, default=3, help="K1 rounds (doctor seq_write, then a save)")
    ap.add_argument("--k1-only", action="store_true", help="K1 rounds only (no doctor read "
                    "figure, no fio curve): for more rounds in the same minutes")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    stoker = os.path.join(ROOT, "build", "stoker")
    bench = os.path.join(ROOT, "build", "bench", "ckpt")
    for p in (stoker, bench):
        if not os.access(p, os.X_OK):
            sys.exit(f"ceilings: {p} is missing (make; make build/bench/ckpt)")
    if not a.k1_only and not shutil.which("fio"):
        sys.exit("ceilings: fio is not installed (scripts/install-deps bench)")
    size = size_bytes(a.size)
    a.rounds = max(1, a.rounds)
    base = a.dir or os.path.join(ROOT, "build")
    work = tempfile.mkdtemp(prefix="ceilings-", dir=base)
    try:
        loads = {"before": load()}
        figs, methods, curve = {}, {"curve": []}, []
        if not a.k1_only:
            figs, methods, curve = fio_side(stoker, work, size, a.runtime, loads)
        rounds = k1_rounds(stoker, bench, work, size, a.rounds)
        loads["after_ckpt"] = load()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(a, figs, methods, curve, rounds, loads)


def fio_side(stoker, work, size, runtime, loads):
    """doctor's read and write figures with their curve, then fio's."""
    figs, methods = doctor(stoker, work, size)
    loads["after_doctor"] = load()
    print(f"doctor (load {loads['after_doctor']:.1f}): seq_write {methods['seq_write']}; "
          f"seq_read {methods['seq_read']}", flush=True)
    for p in methods["curve"]:
        print(f"doctor {p['rw']:5} jobs {p['jobs']} depth {p['depth']:2}: "
              f"{p['bytes_per_s'] / GiB:6.3f} GiB/s", flush=True)
    curve = []
    for rw in ("write", "read"):
        for jobs in (1, 2):
            for depth in (1, 2, 4, 8, 16, 32):
                bw = fio(work, rw, depth, jobs, size, runtime)
                la = load()
                curve.append({"rw": rw, "jobs": jobs, "depth": depth, "bytes_per_s": bw,
                              "load": la})
                print(f"fio {rw:5} jobs {jobs} depth {depth:2}: {bw / GiB:6.3f} GiB/s "
                      f"(load {la:.1f})", flush=True)
            for f in os.listdir(work):
                os.unlink(os.path.join(work, f))
            os.sync()
    return figs, methods, curve


def k1_rounds(stoker, bench, work, size, n):
    """n rounds of doctor's seq_write and a save, back to back; odd rounds
    save first, so a disk that drifts within a round favours neither."""
    def clear():
        for f in os.listdir(work):
            p = os.path.join(work, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
        os.sync()

    rounds = []
    for k in range(n):
        for step in (("save", "doctor") if k % 2 else ("doctor", "save")):
            clear()
            if step == "doctor":
                ceil, mid = seq_write(stoker, work, size)
                la_d = load()
            else:
                ck = ckpt_save(bench, os.path.join(work, "ck"), size)
                la_c = load()
        clear()
        save = ck["save_gib_s"] * GiB
        rounds.append({"doctor_seq_write": ceil, "doctor_median_point": mid, "ckpt": ck,
                       "save_bytes_per_s": save, "k1": save / ceil, "load_doctor": la_d,
                       "load_ckpt": la_c, "save_first": bool(k % 2)})
        print(f"K1 round {k + 1}{' (save first)' if k % 2 else ''}: doctor seq_write "
              f"{ceil / GiB:.3f} GiB/s (median point {mid / GiB:.3f}, load {la_d:.1f}), save "
              f"{save / GiB:.3f} GiB/s (load {la_c:.1f}, raw 1-stream write "
              f"{ck['raw_write_gib_s']:.3f}): K1 {save / ceil:.2f}", flush=True)
    return rounds


def report(a, figs, methods, curve, rounds, loads):
    best = {rw: max((c["bytes_per_s"] for c in curve if c["rw"] == rw), default=0)
            for rw in ("write", "read")}
    med = sorted(rounds, key=lambda r: r["k1"])[len(rounds) // 2]
    save = med["save_bytes_per_s"]
    res = {"doctor": figs, "doctor_method": methods, "fio_curve": curve, "fio_best": best,
           "k1_rounds": rounds, "load": loads, "k1_vs_doctor": med["k1"],
           "k1_vs_fio_best": save / best["write"] if best["write"] else None}
    if curve:
        print(f"doctor seq_write {figs.get('seq_write', 0) / GiB:.3f} GiB/s, fio best write "
              f"{best['write'] / GiB:.3f} GiB/s; doctor seq_read "
              f"{figs.get('seq_read', 0) / GiB:.3f} GiB/s, fio best read "
              f"{best['read'] / GiB:.3f} GiB/s")
    ks = sorted(r["k1"] for r in rounds)
    vs_fio = (f", {res['k1_vs_fio_best']:.2f} of fio's best write" if curve else "")
    print(f"ckpt save {save / GiB:.3f} GiB/s (the median round of {len(rounds)}, load "
          f"{med['load_ckpt']:.1f}): K1 = {res['k1_vs_doctor']:.2f} of its round's doctor "
          f"seq_write{vs_fio}; rounds' K1 sorted: {', '.join(f'{x:.2f}' for x in ks)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
