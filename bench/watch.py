"""stoker watch benchmarks (the fake NVML stands in for the driver, so the
figures are the agent's own cost, not NVML's):

W1  overhead at a 1 s interval with 8 GPUs and 1,000 processes on the host
    (real `sleep` processes), two of them on each GPU: CPU share of one core
    and RSS. Target: under 1% of a core and under 10 MiB. W1b: the same with
    all 1,000 processes on the GPUs (the agent reads each one's /proc stat
    every sample: the worst case).
W2  scrape latency p50/p99 with 50 concurrent scrapers of /metrics (the
    exposition of W1's node, from 10 loopback source addresses, since the
    agent allows 32 connections per address).
W3  a day of 1 s samples in fast time with process churn (a new process on
    every GPU each minute): RSS at the start, middle and end.

Prints a table and writes bench/results/watch.json. W1_SECONDS, W2_SCRAPES
and W3_SAMPLES shorten or lengthen the runs."""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BUILD, ROOT, STK  # noqa: E402

FAKE = os.path.join(BUILD, "fakenvml", "libnvidia-ml.so.1")
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid, field="VmRSS:"):
    """VmRSS, or RssAnon (the agent's own memory, without the shared
    libraries' pages that VmRSS counts)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def start_agent(tmp, scenario, *args):
    env = dict(os.environ, FAKE_NVML_SCENARIO=scenario)
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.unlink(port_file)
    p = subprocess.Popen([STK, "watch", "--nvml", FAKE, "--runtime-dir", tmp, "-q",
                          "--listen", "127.0.0.1:0", "--port-file", port_file, *args],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(200):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return p, int(open(port_file).read())
        time.sleep(0.05)
    p.kill()
    raise SystemExit("stoker watch did not start: " + p.stderr.read().decode())


def overhead(tmp, sleepers, on_gpus, scrape_too):
    sc = os.path.join(tmp, "w1.txt")
    with open(sc, "w") as f:
        for g in range(8):
            f.write(f'gpu {g} name "NVIDIA H100 80GB HBM3" gpm 1\n')
            f.write(f"at 0 gpu {g} util 70 power_w 500 temp 60 sm_clock 1980 smact 50 tensor 30\n")
        for i, s in enumerate(sleepers[:on_gpus]):
            f.write(f"at 0 gpu {i % 8} proc {s.pid} used_mib 100 sm 10\n")
    p, port = start_agent(tmp, sc, "--interval", "1")
    w2 = None
    try:
        time.sleep(3)  # past start-up
        secs = float(os.environ.get("W1_SECONDS", "30"))
        c0, t0 = proc_cpu_s(p.pid), time.monotonic()
        # A Prometheus-like scrape every 15 s while it runs.
        while time.monotonic() - t0 < secs:
            time.sleep(min(15, secs - (time.monotonic() - t0)))
            scrape(port, "127.0.0.1")
        c1, t1 = proc_cpu_s(p.pid), time.monotonic()
        w1 = {"seconds": round(t1 - t0, 1), "gpus": 8, "host_processes": len(sleepers),
              "gpu_processes": on_gpus, "cpu_share_of_core": (c1 - c0) / (t1 - t0),
              "rss_mib": rss_kib(p.pid) / 1024, "rss_anon_mib": rss_kib(p.pid, "RssAnon:") / 1024}
        body = scrape(port, "127.0.0.1")[1]
        w1["exposition_kib"] = len(body) / 1024
        if scrape_too:
            w2 = scrape_load(port, int(os.environ.get("W2_SCRAPES", "2000")))
            w2["exposition_kib"] = w1["exposition_kib"]
            w2["agent_rss_mib_after"] = rss_kib(p.pid) / 1024
    finally:
        p.terminate()
        p.wait()
    return w1, w2


def w1_w2(tmp):
    sleepers = [subprocess.Popen(["sleep", "900"]) for _ in range(1000)]
    try:
        w1, _ = overhead(tmp, sleepers, 16, False)
        w1b, w2 = overhead(tmp, sleepers, 1000, True)
    finally:
        for s in sleepers:
            s.kill()
        for s in sleepers:
            s.wait()
    return w1, w1b, w2


def scrape(port, source):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    t0 = time.perf_counter()
    c.request("GET", "/metrics")
    r = c.getresponse()
    body = r.read()
    dt = time.perf_counter() - t0
    c.close()
    return r.status, body, dt


def scrape_load(port, total):
    lat, errors, lock = [], [0], threading.Lock()
    per = max(1, total // 50)

    def worker(i):
        src = f"127.0.0.{2 + i % 10}"
        for _ in range(per):
            try:
                status, body, dt = scrape(port, src)
                ok = status == 200 and body
            except OSError:
                ok, dt = False, 0
            with lock:
                if ok:
                    lat.append(dt)
                else:
                    errors[0] += 1

    th = [threading.Thread(target=worker, args=(i,)) for i in range(50)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1e3 if lat else float("nan")  # noqa: E731
    return {"scrapers": 50, "scrapes": len(lat), "errors": errors[0], "p50_ms": q(0.5),
            "p99_ms": q(0.99), "max_ms": lat[-1] * 1e3 if lat else float("nan"),
            "scrapes_per_s": len(lat) / wall}


def w3(tmp):
    n = int(os.environ.get("W3_SAMPLES", "86400"))
    sc = os.path.join(tmp, "w3.txt")
    with open(sc, "w") as f:
        for g in range(8):
            f.write(f'gpu {g} name "NVIDIA H100 80GB HBM3"\n')
            f.write(f"at 0 gpu {g} util 60 power_w 400\n")
        pid = 4000000
        for step in range(0, n, 60):
            for g in range(8):
                if step:
                    f.write(f"at {step} gpu {g} proc_end {pid - 8}\n")
                f.write(f"at {step} gpu {g} proc {pid} used_mib 100 sm 30\n")
                pid += 1
    env = dict(os.environ, FAKE_NVML_SCENARIO=sc)
    p = subprocess.Popen([STK, "watch", "--nvml", FAKE, "--runtime-dir", tmp, "-q", "--no-http",
                          "--fast-time", "--samples", str(n), "--metrics-out",
                          os.path.join(tmp, "w3.prom")], env=env, stderr=subprocess.PIPE)
    rss, t0 = [], time.monotonic()
    while p.poll() is None:
        try:
            rss.append(rss_kib(p.pid, "RssAnon:"))
        except OSError:
            break
        time.sleep(0.2)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit("W3 agent failed: " + p.stderr.read().decode())
    rss = [r for r in rss if r]
    third = max(1, len(rss) // 3)
    return {"samples": n, "processes_started": (n + 59) // 60 * 8, "wall_s": wall,
            "rss_mib_first_third_max": max(rss[:third]) / 1024 if rss else None,
            "rss_mib_last_third_max": max(rss[-third:]) / 1024 if rss else None,
            "samples_per_s": n / wall}


def main():
    if not os.path.exists(FAKE):
        subprocess.run(["make", "-C", ROOT, "--no-print-directory", "build/fakenvml/libnvidia-ml.so.1"],
                       check=True, stdout=subprocess.DEVNULL)
    load = open("/proc/loadavg").read().split()[:3]
    with tempfile.TemporaryDirectory() as tmp:
        a, ab, b = w1_w2(tmp)
        c = w3(tmp)
    print(f"stoker watch benchmarks (fake NVML; load average {' '.join(load)} on {os.cpu_count()} cores)")
    for name, r in (("W1 ", a), ("W1b", ab)):
        print(f"{name} overhead, 1 s interval, 8 GPUs, {r['host_processes']} host processes, "
              f"{r['gpu_processes']} on GPUs: {100 * r['cpu_share_of_core']:.2f}% of a core, "
              f"RSS {r['rss_mib']:.1f} MiB ({r['rss_anon_mib']:.1f} MiB its own, the rest shared "
              f"libraries), page {r['exposition_kib']:.0f} KiB")
    print("    (target < 1% of a core and < 10 MiB; dcgm-exporter: 15-20% of a core, ~70 MiB)")
    print(f"W2 scrape latency, 50 concurrent scrapers, {b['exposition_kib']:.0f} KiB page: "
          f"p50 {b['p50_ms']:.1f} ms, p99 {b['p99_ms']:.1f} ms, {b['scrapes']} scrapes, "
          f"{b['errors']} errors, {b['scrapes_per_s']:.0f}/s")
    print(f"W3 {c['samples']} samples in fast time, {c['processes_started']} processes churned: "
          f"own RSS (RssAnon) max {c['rss_mib_first_third_max']:.2f} MiB in the first third, "
          f"{c['rss_mib_last_third_max']:.2f} MiB in the last ({c['samples_per_s']:.0f} samples/s)")
    out = {"load_avg": load, "cores": os.cpu_count(), "W1": a, "W1b": ab, "W2": b, "W3": c,
           "note": "fake NVML: the agent's own cost; the real driver's calls add to W1"}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "watch.json"), "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
