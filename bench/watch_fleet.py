"""W5: stoker watch pages from a 1,000-node fleet scraped by a real
Prometheus on loopback (issue 21, section 4).

FLEET_AGENTS agents (default 4; 8 fake H100s with NVLink, a mapped job on
each GPU: the series set of a busy node) stand for every node: Prometheus
is given 1,000 targets spread over them, each with its own `node` label,
so it makes 1,000 scrapes every interval and stores 1,000 nodes' series,
as it would for a fleet. (Several agents, because one agent serves at
most 64 connections, 32 from one address, and Prometheus keeps one per
target: a real node's agent sees one or two.) What is reported is what the issue asks: samples per scrape
and in all, samples/s ingested (Prometheus' own counter), bytes on the
wire per scrape (the gzipped page, which Prometheus asks for, and the
plain one), and the scrape-duration p99 over the targets (what the agent
answers in, seen from Prometheus).

FLEET_NODES (1000), FLEET_INTERVAL_S (15) and FLEET_SECONDS (90) change the
run. Needs /usr/bin/prometheus (Debian's prometheus). Writes
bench/results/watch_fleet.json."""
import gzip
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BUILD, ROOT, STK  # noqa: E402
from watch import FAKE, start_agent  # noqa: E402

NODES = int(os.environ.get("FLEET_NODES", "1000"))
INTERVAL = int(os.environ.get("FLEET_INTERVAL_S", "15"))
SECONDS = int(os.environ.get("FLEET_SECONDS", "90"))
AGENTS = int(os.environ.get("FLEET_AGENTS", "4"))
PROM = "/usr/bin/prometheus"


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def query(pport, q):
    url = f"http://127.0.0.1:{pport}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=30) as r:
        res = json.load(r)["data"]["result"]
    return float(res[0]["value"][1]) if res else float("nan")


def page_bytes(port):
    out = {}
    for enc in ("gzip", "identity"):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/metrics", headers={"Accept-Encoding": enc})
        body = c.getresponse().read()
        c.close()
        out[enc] = len(body)
        if enc == "gzip":
            text = gzip.decompress(body).decode()
            out["samples"] = sum(1 for line in text.splitlines() if line and line[0] != "#")
    return out


def main():
    if not os.path.exists(PROM):
        print("W5 skipped: no /usr/bin/prometheus (apt-get install prometheus)")
        return
    if not os.path.exists(FAKE):
        subprocess.run(["make", "-C", ROOT, "--no-print-directory", "build/fakenvml/libnvidia-ml.so.1"],
                       check=True, stdout=subprocess.DEVNULL)
    load = open("/proc/loadavg").read().split()[:3]
    with tempfile.TemporaryDirectory() as tmp:
        sc = os.path.join(tmp, "sc.txt")
        mapdir = os.path.join(tmp, "map")
        os.mkdir(mapdir)
        with open(sc, "w") as f:
            for i in range(8):
                f.write(f"gpu {i} name \"NVIDIA H100 80GB HBM3\" nvlinks 18 util {10 * i} power_w 300\n")
                with open(os.path.join(mapdir, str(i)), "w") as m:
                    m.write(f"job{i}\n")
        agents = []
        for a in range(AGENTS):
            d = os.path.join(tmp, f"a{a}")
            os.mkdir(d)
            agents.append(start_agent(d, sc, "--mapping-dir", mapdir))
        port = agents[0][1]
        prom = None
        try:
            time.sleep(2)
            page = page_bytes(port)
            pport = free_port()
            with open(os.path.join(tmp, "prom.yml"), "w") as f:
                f.write(f"global:\n  scrape_interval: {INTERVAL}s\n  scrape_timeout: 10s\n"
                        "scrape_configs:\n"
                        f"  - job_name: prometheus\n    scrape_interval: 5s\n"
                        f"    static_configs:\n      - targets: ['127.0.0.1:{pport}']\n"
                        "  - job_name: stoker\n    static_configs:\n")
                for n in range(NODES):
                    ap = agents[n % AGENTS][1]
                    f.write(f"      - targets: ['127.0.0.1:{ap}']\n        labels: {{node: n{n:04d}}}\n")
            prom = subprocess.Popen([PROM, f"--config.file={tmp}/prom.yml", f"--storage.tsdb.path={tmp}/tsdb",
                                     f"--web.listen-address=127.0.0.1:{pport}"],
                                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "prom.log"), "w"))
            time.sleep(SECONDS)
            r = {
                "nodes": NODES, "interval_s": INTERVAL, "seconds": SECONDS,
                "targets_up": query(pport, "count(up{job=\"stoker\"} == 1)"),
                "samples_per_scrape": query(pport, "avg(scrape_samples_scraped{job=\"stoker\"})"),
                "samples_per_round": query(pport, "sum(scrape_samples_scraped{job=\"stoker\"})"),
                "samples_per_s_ingested": query(pport, "sum(rate(prometheus_tsdb_head_samples_appended_total[1m]))"),
                "head_series": query(pport, "prometheus_tsdb_head_series"),
                "scrape_p50_ms": 1000 * query(pport, "quantile(0.5, scrape_duration_seconds{job=\"stoker\"})"),
                "scrape_p99_ms": 1000 * query(pport, "quantile(0.99, scrape_duration_seconds{job=\"stoker\"})"),
                "page_gzip_bytes": page["gzip"], "page_plain_bytes": page["identity"],
                "page_samples": page["samples"],
            }
            r["wire_bytes_per_s_gzip"] = r["page_gzip_bytes"] * NODES / INTERVAL
            r["wire_bytes_per_s_plain"] = r["page_plain_bytes"] * NODES / INTERVAL
        finally:
            if prom:
                prom.terminate()
                prom.wait()
            for agent, _ in agents:
                agent.terminate()
                agent.wait()
    print(f"W5 {NODES} simulated nodes scraped every {INTERVAL} s by Prometheus on loopback "
          f"({AGENTS} agents, {SECONDS} s run; load average {' '.join(load)} on {os.cpu_count()} cores):")
    print(f"    targets up {r['targets_up']:.0f}; {r['samples_per_scrape']:.0f} samples per scrape, "
          f"{r['samples_per_round']:.0f} per round; {r['samples_per_s_ingested']:.0f} samples/s ingested; "
          f"{r['head_series']:.0f} series in the head")
    print(f"    page {r['page_gzip_bytes']} B gzipped / {r['page_plain_bytes']} B plain: "
          f"{r['wire_bytes_per_s_gzip'] / 1e6:.2f} MB/s on the wire gzipped, "
          f"{r['wire_bytes_per_s_plain'] / 1e6:.2f} MB/s plain")
    print(f"    scrape duration over targets: p50 {r['scrape_p50_ms']:.1f} ms, p99 {r['scrape_p99_ms']:.1f} ms")
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "watch_fleet.json"), "w") as f:
        json.dump(dict(r, agents=AGENTS, load_avg=load, cores=os.cpu_count(), build=BUILD, stoker=STK), f, indent=2)


if __name__ == "__main__":
    main()
