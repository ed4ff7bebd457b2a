#!/usr/bin/env python3
"""Compare what `stoker watch` reports for each GPU with what nvidia-smi
reports for it, field by field, within the difference two readings taken
a moment apart can show.

    smi_compare.py --smi smi.xml --watch watch.json [--metrics m.prom]

smi.xml is `nvidia-smi -q -x`, watch.json is `stoker watch --once --json`,
m.prom (optional) the exposition from `--metrics-out`, whose DCGM_FI_DEV_*
series are then checked too. Prints one line per field and GPU and exits 1
when any field differs by more than its tolerance. Run on a GPU machine by
scripts/gpu-checks; needs only Python's standard library."""
import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET


def number(text):
    """The leading number of an nvidia-smi value ("81559 MiB", "31 C",
    "69.48 W"), or None for "N/A" and the like."""
    m = re.match(r"\s*(-?[0-9]+(?:\.[0-9]+)?)", text or "")
    return float(m.group(1)) if m else None


def smi_gpus(path):
    root = ET.parse(path).getroot()
    gpus = []
    for g in root.findall("gpu"):
        def t(p):
            e = g.find(p)
            return e.text.strip() if e is not None and e.text else ""
        power = t("gpu_power_readings/instant_power_draw") or t("gpu_power_readings/power_draw") \
            or t("power_readings/power_draw")
        gpus.append({
            "uuid": t("uuid"), "model": t("product_name"), "pci_bus_id": t("pci/pci_bus_id"),
            "fb_total_mib": number(t("fb_memory_usage/total")),
            "fb_used_mib": number(t("fb_memory_usage/used")),
            "util_pct": number(t("utilization/gpu_util")),
            "mem_util_pct": number(t("utilization/memory_util")),
            "temp_c": number(t("temperature/gpu_temp")),
            "power_w": number(power),
            "sm_clock_mhz": number(t("clocks/sm_clock")),
            "mem_clock_mhz": number(t("clocks/mem_clock")),
        })
    return root.findtext("driver_version", "").strip(), gpus


# field: (absolute tolerance, relative tolerance); the larger applies.
# Utilization is a percentage over the last sample period in both tools,
# power an instant reading, so they move between two readings; the rest
# should agree closely.
TOLERANCE = {"fb_total_mib": (0, 0), "fb_used_mib": (64, 0.02), "util_pct": (15, 0),
             "mem_util_pct": (15, 0), "temp_c": (3, 0), "power_w": (25, 0.15),
             "sm_clock_mhz": (100, 0.1), "mem_clock_mhz": (100, 0.05)}
EXACT = ("uuid", "model", "pci_bus_id")
# DCGM_FI_DEV_* series and the nvidia-smi field each should match.
SERIES = {"DCGM_FI_DEV_FB_USED": "fb_used_mib", "DCGM_FI_DEV_GPU_TEMP": "temp_c",
          "DCGM_FI_DEV_POWER_USAGE": "power_w", "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
          "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz", "DCGM_FI_DEV_GPU_UTIL": "util_pct"}


def series(path):
    """{(name, UUID): value} of the exposition's device series (the first
    of each, whatever its other labels)."""
    out = {}
    pat = re.compile(r'^([A-Z_]+)\{([^}]*)\}\s+(\S+)')
    with open(path) as f:
        for line in f:
            m = pat.match(line)
            if not m or m.group(1) not in SERIES:
                continue
            u = re.search(r'UUID="([^"]*)"', m.group(2))
            if u:
                out.setdefault((m.group(1), u.group(1)), float(m.group(3)))
    return out


def close(field, a, b):
    if a is None or b is None:
        return False
    ab, rel = TOLERANCE[field]
    return abs(a - b) <= max(ab, rel * max(abs(a), abs(b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smi", required=True)
    ap.add_argument("--watch", required=True)
    ap.add_argument("--metrics")
    a = ap.parse_args()
    driver, smi = smi_gpus(a.smi)
    with open(a.watch) as f:
        watch = json.load(f)
    bad = 0
    if driver and driver not in watch.get("nvml", ""):
        print(f"driver   nvidia-smi {driver} not named in stoker's {watch.get('nvml')!r}  DIFF")
        bad += 1
    by_uuid = {g["uuid"]: g for g in watch.get("gpus", [])}
    if len(by_uuid) != len(smi):
        print(f"gpus     nvidia-smi {len(smi)}, stoker {len(by_uuid)}  DIFF")
        bad += 1
    prom = series(a.metrics) if a.metrics else {}
    for s in smi:
        w = by_uuid.get(s["uuid"])
        if w is None:
            print(f"{s['uuid']}: not in stoker's report  DIFF")
            bad += 1
            continue
        for k in EXACT:
            ok = s[k] == w.get(k)
            bad += not ok
            print(f"{s['uuid'][:12]} {k:14} smi {s[k]!r:>24} stoker {w.get(k)!r:>24}  {'ok' if ok else 'DIFF'}")
        for k in TOLERANCE:
            if s[k] is None:
                print(f"{s['uuid'][:12]} {k:14} smi {'N/A':>24} stoker {w.get(k)!r:>24}  (not compared)")
                continue
            ok = close(k, s[k], w.get(k))
            bad += not ok
            print(f"{s['uuid'][:12]} {k:14} smi {s[k]:>24} stoker {w.get(k)!r:>24}  {'ok' if ok else 'DIFF'}")
        for name, k in SERIES.items():
            if not prom or s[k] is None:
                continue
            v = prom.get((name, s["uuid"]))
            ok = close(k, s[k], v)
            bad += not ok
            print(f"{s['uuid'][:12]} {name:28} smi {s[k]:>10} exposition {v!r:>10}  {'ok' if ok else 'DIFF'}")
    print(f"{bad} field(s) differ" if bad else "every field agrees")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
