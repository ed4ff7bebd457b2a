#!/usr/bin/env python3
"""stoker watch against dcgm-exporter, counter by counter (issue 21, section 2).

Runs `stoker watch` over the fake NVML scenario tests/dcgm/scenario.txt and
checks its pages against what dcgm-exporter 4.5.3-4.8.2 would expose for the
same scenario (tests/dcgm/dcgm-exporter.series.yml, written by hand):

  1. every counter of dcgm-exporter's default list (etc/default-counters.csv
     of that release: names, types and units below, read from it) has the
     same name, TYPE, label set and values (so the same unit), or is left
     out on purpose and named, with its reason, in docs/watch.md;
  2. the other DCGM fields stoker exports have the TYPE dcgm-exporter gives
     them where its lists name them (commented out there);
  3. `promtool check metrics` finds nothing on stoker's page beyond what it
     finds on dcgm-exporter's own for the same names;
  4. NVIDIA's dashboard (Grafana 12239) and common health alerts, run by
     `promtool test rules` (tests/dcgm/dashboard.test.yml), give the same
     numbers on both.

  dcgm_compat.py --stoker build/stoker --nvml build/fakenvml/libnvidia-ml.so.1

Prints one line per check and `dcgm-compat: ok` at the end; exits 1 naming
each difference. Without promtool, parts 3 and 4 are skipped (and said so).
"""
import argparse
import gzip
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "dcgm")

# dcgm-exporter 4.5.3-4.8.2's default counters (etc/default-counters.csv):
# name, Prometheus type, unit of the value. DCGM_FI_DRIVER_VERSION, the
# list's one label field, is checked as a label.
DEFAULT = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "MHz"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "MHz"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "C"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "C"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "W"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "mJ"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "replays"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "%"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "%"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "%"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "%"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "last XID"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "MiB"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "MiB"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "MiB"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "MB/s (DCGM's rate)"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "0/1"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "rows"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "rows"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "0/1"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "ratio"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "ratio"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "ratio"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "bytes/s"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "bytes/s"),
]

# Default counters stoker leaves out on purpose. docs/watch.md must name
# each (its "Differences from dcgm-exporter" says why).
ABSENT = {}

# Fields stoker exports that dcgm-exporter lists only commented out (its
# default-counters.csv and dcp-metrics-included.csv): the type it gives
# them there. Fields neither list names (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS,
# DCGM_FI_DEV_ROW_REMAP_PENDING) have no dcgm-exporter type to match.
LISTED_OFF = {
    "DCGM_FI_DEV_POWER_VIOLATION": "counter",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "counter",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "counter",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "counter",
    "DCGM_FI_DEV_RETIRED_SBE": "counter",
    "DCGM_FI_DEV_RETIRED_DBE": "counter",
    "DCGM_FI_DEV_RETIRED_PENDING": "counter",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "counter",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "counter",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "counter",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "counter",
    "DCGM_FI_PROF_SM_ACTIVE": "gauge",
}

# dcgm-exporter's labels on a whole GPU's series (default device mode), and
# the XID series' attributes.
GPU_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
              "DCGM_FI_DRIVER_VERSION"}
XID_LABELS = {"err_code", "err_msg"}
SCRAPE = {"instance": "node1:9400", "job": "gpu"}  # what the scrape adds
STEP_S = 15
STEPS = 4  # pages compared: the agent's samples 1..4 (0 is its warm-up)

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_labels(s):
    out, pos = {}, 0
    while pos < len(s):
        m = LABEL.match(s, pos)
        if not m:
            raise ValueError("bad labels: " + s)
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
    return out


def parse_page(text):
    """TYPE by family, and (name, labels, value) samples."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
        elif line and not line.startswith("#"):
            m = LINE.match(line)
            if not m:
                raise ValueError("not an exposition line: " + line)
            samples.append((m.group(1), parse_labels(m.group(3) or ""), float(m.group(4))))
    return types, samples


def key(name, labels):
    return name + "{" + ",".join('%s="%s"' % (k, labels[k]) for k in sorted(labels)) + "}"


def expand(values):
    """promtool's series notation -> a list (None: missing, 'stale')."""
    out = []
    for tok in values.split():
        if tok == "stale":
            out.append("stale")
            continue
        m = re.match(r'^(_|[-+0-9.eE]+?)(?:([-+])([0-9.eE]+))?(?:x(\d+))?$', tok)
        if not m:
            raise ValueError("series value " + tok)
        start, sign, step, n = m.group(1), m.group(2), m.group(3), int(m.group(4) or 0)
        if start == "_":
            out.extend([None] * (n + 1))
            continue
        v, d = float(start), float(step or 0) * (-1 if sign == "-" else 1)
        out.extend(v + d * i for i in range(n + 1))
    return out


def read_series(path):
    series, name = {}, None
    with open(path) as f:
        for line in f:
            m = re.match(r"^\s*- series: '(.*)'\s*$", line)
            if m:
                s = m.group(1)
                i = s.index("{")
                name = (s[:i], parse_labels(s[i + 1:-1]))
                continue
            m = re.match(r"^\s*values: '(.*)'\s*$", line)
            if m and name:
                series[key(*name)] = (name[0], name[1], expand(m.group(1)))
                name = None
    return series


def notation(vals):
    out, seen = [], False
    for v in vals:
        if v == "stale":
            out.append("stale")
        elif v is None:
            out.append("stale" if seen and out[-1] not in ("stale", "_") else "_")
        else:
            seen = True
            out.append(repr(float(v)) if v != int(v) else str(int(v)))
    return " ".join(out)


def run_stoker(args, tmp):
    pages = []
    for k in range(STEPS):
        out = os.path.join(tmp, "m%d.prom" % k)
        env = dict(os.environ, FAKE_NVML_SCENARIO=os.path.join(DATA, "scenario.txt"))
        cmd = [args.stoker, "watch", "--nvml", args.nvml, "--fast-time", "--interval", str(STEP_S),
               "--samples", str(k + 2), "--no-http", "--hostname", "node1", "--metrics-out", out,
               "--runtime-dir", tmp, "--pod-resources", "none", "-q"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("dcgm-compat: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
        with open(out) as f:
            pages.append(f.read())
    return pages


def check_counters(pages, docs):
    types, last = parse_page(pages[-1])
    present = {s[0] for s in last}
    for name, typ, unit in DEFAULT:
        if name in ABSENT:
            if name in present:
                fail("%s is listed as absent but stoker exports it" % name)
            if name not in docs:
                fail("%s is absent and docs/watch.md does not say why" % name)
            print("absent on purpose: %s (%s; docs/watch.md)" % (name, ABSENT[name]))
            continue
        if name not in present:
            fail("%s: no series" % name)
            continue
        if types.get(name) != typ:
            fail("%s: TYPE %s, dcgm-exporter's is %s" % (name, types.get(name), typ))
        want = GPU_LABELS | (XID_LABELS if name == "DCGM_FI_DEV_XID_ERRORS" else set())
        for n, labels, _ in last:
            if n == name and set(labels) != want:
                fail("%s: labels %s, dcgm-exporter's are %s" % (name, sorted(labels), sorted(want)))
        print("same name, type, labels: %s (%s, %s)" % (name, typ, unit))
    for name, typ in sorted(LISTED_OFF.items()):
        if name in types and types[name] != typ:
            fail("%s: TYPE %s, dcgm-exporter's (commented-out) list says %s" % (name, types[name], typ))


def stoker_series(pages, names):
    """stoker's pages as series over the steps, with the scrape's labels."""
    series = {}
    for step, page in enumerate(pages):
        for name, labels, v in parse_page(page)[1]:
            if name not in names:
                continue
            labels = dict(labels, **SCRAPE)
            k = key(name, labels)
            if k not in series:
                series[k] = (name, labels, [None] * len(pages))
            series[k][2][step] = v
    return series


def same(a, b):
    if a is None or b is None or a == "stale" or b == "stale":
        return (a in (None, "stale")) == (b in (None, "stale"))
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def check_series(pages):
    dcgm = read_series(os.path.join(DATA, "dcgm-exporter.series.yml"))
    names = {n for n, _, _ in DEFAULT} - set(ABSENT)
    ours = stoker_series(pages, names)
    checked = 0
    for k, (name, labels, vals) in sorted(dcgm.items()):
        if name in ABSENT:
            continue
        if k not in ours:
            fail("no stoker series %s" % k)
            continue
        got = ours[k][2]
        vals = vals + [None] * (len(got) - len(vals))  # a series that ended
        if len(vals) != len(got) or not all(same(a, b) for a, b in zip(got, vals)):
            fail("%s: stoker %s, dcgm-exporter %s" % (k, notation(got), notation(vals)))
        checked += 1
    for k in sorted(set(ours) - set(dcgm)):
        fail("stoker series that dcgm-exporter would not have: %s" % k)
    print("series: %d of dcgm-exporter's, values the same at each of %d steps" % (checked, STEPS))
    return dcgm, ours


def lint(promtool, text, tmp, name):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    with open(path) as f:
        r = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True, text=True)
    msgs = set()
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(r'^(\S+) (.*)$', line.strip())
        if m and re.match(r'^[A-Za-z_:][A-Za-z0-9_:]*$', m.group(1)):
            msgs.add((m.group(1), m.group(2)))
        elif line.strip():
            msgs.add(("", line.strip()))
    return msgs


def dcgm_page(dcgm):
    """dcgm-exporter's page at the last step, from the hand-written series."""
    types = dict((n, t) for n, t, _ in DEFAULT)
    fams = {}
    for name, labels, vals in dcgm.values():
        v = vals[-1]
        if v is None or v == "stale":
            continue
        labels = {k: x for k, x in labels.items() if k not in SCRAPE}
        fams.setdefault(name, []).append('%s{%s} %s' % (
            name, ",".join('%s="%s"' % (k, x) for k, x in labels.items()), repr(v)))
    out = []
    for name in sorted(fams):
        out += ["# HELP %s %s" % (name, name), "# TYPE %s %s" % (name, types[name])] + fams[name]
    return "\n".join(out) + "\n"


def report_sizes(ours, theirs):
    """W4: bytes per scrape, plain and gzipped (zlib level 6, the agent's),
    for stoker's whole page, its DCGM_FI_* families alone, and
    dcgm-exporter's page for the same GPUs."""
    def dcgm_line(line):
        w = line.split()
        return line.startswith("DCGM_FI_") or (
            len(w) > 2 and w[0] == "#" and w[1] in ("HELP", "TYPE") and w[2].startswith("DCGM_FI_"))
    dcgm_only = "".join(line + "\n" for line in ours.splitlines() if dcgm_line(line))
    for what, text in (("stoker, whole page", ours), ("stoker, DCGM_FI_* only", dcgm_only),
                       ("dcgm-exporter (hand-written)", theirs)):
        raw = text.encode()
        print("W4 %-28s %7d B plain, %6d B gzipped" % (what, len(raw),
                                                        len(gzip.compress(raw, 6))))


def check_promtool(promtool, pages, dcgm, tmp):
    ours = lint(promtool, pages[-1], tmp, "stoker.prom")
    theirs = lint(promtool, dcgm_page(dcgm), tmp, "dcgm.prom")
    kinds = {msg for _, msg in theirs}
    for name, msg in sorted(ours):
        if (name, msg) in theirs:
            continue
        if name.startswith("DCGM_") and msg in kinds:
            continue  # a DCGM field outside the default list: the same finding as dcgm-exporter's
        fail("promtool check metrics on stoker's page: %s %s" % (name, msg))
    own = {n for n in parse_page(pages[-1])[0] if not n.startswith("DCGM_")}
    print("promtool check metrics: %d findings on stoker's page, %d on dcgm-exporter's, all on DCGM "
          "names and of the kinds dcgm-exporter's get (%s); none on stoker's own %d families"
          % (len(ours), len(theirs), "; ".join(sorted(kinds)), len(own)))


def check_rules(promtool, dcgm, ours, tmp):
    with open(os.path.join(DATA, "dashboard.test.yml")) as f:
        test = f.read()
    for who, series in (("dcgm-exporter", dcgm), ("stoker", ours)):
        lines = ["\n"]
        for name, labels, vals in series.values():
            lines.append("      - series: '%s{%s}'\n        values: '%s'\n" % (
                name, ",".join('%s="%s"' % (k, v) for k, v in labels.items()), notation(vals)))
        d = os.path.join(tmp, who)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(DATA, "alerts.yml"), d)
        with open(os.path.join(d, "test.yml"), "w") as f:
            f.write(test.replace("@SERIES@", "".join(lines).rstrip("\n")))
        r = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=d, capture_output=True, text=True)
        if r.returncode != 0:
            fail("dashboard 12239 and alerts on %s's series:\n%s" % (who, (r.stdout + r.stderr).strip()))
        else:
            print("dashboard 12239 panels, variables and 5 alerts: pass on %s's series" % who)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stoker", required=True)
    ap.add_argument("--nvml", required=True, help="the fake NVML library")
    ap.add_argument("--promtool", default=shutil.which("promtool"))
    a = ap.parse_args()
    with open(os.path.join(ROOT, "docs", "watch.md")) as f:
        docs = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        pages = run_stoker(a, tmp)
        check_counters(pages, docs)
        dcgm, ours = check_series(pages)
        report_sizes(pages[-1], dcgm_page(dcgm))
        if a.promtool:
            check_promtool(a.promtool, pages, dcgm, tmp)
            check_rules(a.promtool, dcgm, ours, tmp)
        else:
            print("skipped: promtool checks (no promtool; Debian's prometheus package has it)")
    if failures:
        print("dcgm-compat: %d differences" % len(failures))
        return 1
    print("dcgm-compat: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
