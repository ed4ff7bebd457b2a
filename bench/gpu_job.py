#!/usr/bin/env python3
"""A real PyTorch training job on a GPU fed by stoker.torch, for checking
`stoker watch`'s input-stall attribution (scripts/gpu-checks runs it).

    gpu_job.py DATA [--threads N] [--seconds S] [--batch B] [--json FILE]

trains torchvision's ResNet-18 on DATA's JPEGs (random 224 crops decoded
by stoker on N threads, handed out on the GPU) for S seconds and writes
what it measured of itself: its pid, steps, samples/s and the seconds its
loop waited in next() for a batch. Each step ends with loss.item(), so the
loop waits either for the GPU or for input, never both.

    gpu_job.py --check STARVED.json FED.json --metrics job.prom

compares two such runs with the agent's exposition: each job's
stoker_job_input_wait_seconds_total (its hpc_job is pid-PID) must be
within 20% (or 1 s) of the wait the job measured itself, the starved job
must have waited for at least a third of its run, and the fed one less
than the starved one. Exits 1 naming what differs."""
import argparse
import json
import os
import re
import sys
import time


def train(a):
    import torch
    import torchvision
    import stoker.torch as st
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet18(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    # Warm-up outside the clock, on random input of the batch's shape: the
    # CUDA context, cuDNN's kernel search and the lazy loading of kernels
    # take seconds on the first steps, which are neither input wait nor
    # the steady state the agent is checked against.
    for _ in range(3):
        step(torch.randn(a.batch, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last),
             torch.randint(0, 1000, (a.batch,), device="cuda"))
    ds = st.StokerDataset(a.data, a.batch, decode="jpeg", size=224, layout="chw",
                          threads=a.threads, device="cuda", seed=1, pin_memory=not a.no_pin,
                          drop_last=True)  # one batch shape: cuDNN picks its kernels once
    steps = samples = 0
    wait = 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        it = iter(ds)
        while True:
            w0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - w0
            if x.shape[-1] == 3:  # (B, H, W, 3) -> (B, 3, H, W)
                x = x.permute(0, 3, 1, 2)
            step(((x.float() - mean) / std).contiguous(memory_format=torch.channels_last), y)
            steps += 1
            samples += len(y)
            if time.perf_counter() - t0 >= a.seconds:
                break
    wall = time.perf_counter() - t0
    ds.close()
    r = {"pid": os.getpid(), "threads": a.threads, "steps": steps, "samples": samples,
         "wall_s": round(wall, 3), "wait_s": round(wait, 3), "wait_ratio": round(wait / wall, 4),
         "samples_per_s": round(samples / wall, 1), "gpu": torch.cuda.get_device_name()}
    print(json.dumps(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)


def job_wait(prom, pid):
    pat = re.compile(r'^stoker_job_input_wait_seconds_total\{[^}]*hpc_job="pid-%d"[^}]*\}\s+(\S+)' % pid)
    with open(prom) as f:
        for line in f:
            m = pat.match(line)
            if m:
                return float(m.group(1))
    return None


def check(a):
    bad = 0
    runs = []
    for path in a.check:
        with open(path) as f:
            runs.append(json.load(f))
    for r in runs:
        agent = job_wait(a.metrics, r["pid"])
        ok = agent is not None and abs(agent - r["wait_s"]) <= max(1.0, 0.2 * r["wait_s"])
        print(f"pid {r['pid']} threads {r['threads']}: {r['samples_per_s']} samples/s, waited "
              f"{r['wait_s']} s of {r['wall_s']} s itself; the agent says {agent} s  "
              f"{'ok' if ok else 'DIFF'}")
        bad += not ok
    starved, fed = runs
    if starved["wait_ratio"] < 1 / 3:
        print(f"the starved job waited only {starved['wait_ratio']:.0%} of its run")
        bad += 1
    if fed["wait_ratio"] >= starved["wait_ratio"]:
        print("the fed job waited as much as the starved one")
        bad += 1
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--no-pin", action="store_true",
                    help="stoker's batches in pageable memory (torch pins a copy of each)")
    ap.add_argument("--json")
    ap.add_argument("--check", nargs=2, metavar=("STARVED", "FED"))
    ap.add_argument("--metrics")
    a = ap.parse_args()
    if a.check:
        if not a.metrics:
            ap.error("--check needs --metrics")
        return check(a)
    if not a.data:
        ap.error("DATA is required")
    train(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
