"""P4's anchor: WebDataset dict samples (jpg + cls + json members) through
the `webdataset` library's own loader, used as its documentation shows:

  wds.WebDataset(shards, shardshuffle=...) .shuffle(1000)
     .decode(IMAGE) .to_tuple("jpg", "cls", "json") .batched(64)
  in torch.utils.data.DataLoader(batch_size=None, num_workers=W)

IMAGE is "torchrgb8" (webdataset's own image handler: PIL decodes, a
(3, H, W) uint8 tensor comes out) or "tv" (a handler of ours that decodes
with torchvision.io.decode_image, as stoker's "image" field decoder does,
so the decoder itself is not what differs). "cls" becomes an int and
"json" the parsed value by webdataset's default handlers. The work is
stoker's side's in bench/python.py (p4_stoker): decode the jpg to a uint8
tensor, parse cls and json, batches of 64.

Run by bench/python.py in the anchors' environment (.venv-anchors, made by
bench/anchors-setup), one setting per process:

  .venv-anchors/bin/python bench/anchors_p4.py SHARD_DIR WORKERS IMAGE

Timed from before the dataset is built (the shard list included) to after
the last batch and the workers' exit, imports excluded. Prints one JSON
object: samples, samples_per_s, cpu_s_per_1000 (this process, its threads
and its reaped workers), version; or exits non-zero with one line on
stderr saying why."""
import glob
import json
import os
import resource
import sys
import time

BATCH = 64


def cpu_s():
    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        s = resource.getrusage(who)
        t += s.ru_utime + s.ru_stime
    return t


def tv_image(key, data):
    """A webdataset handler: image members through torchvision.io."""
    if key.rsplit(".", 1)[-1].lower() not in ("jpg", "jpeg", "png"):
        return None
    import torch
    from torchvision.io import ImageReadMode, decode_image
    return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                        mode=ImageReadMode.RGB)


def run(shard_dir, workers, image):
    import importlib.metadata
    import torch
    import webdataset as wds

    c0, t0, n = cpu_s(), time.perf_counter(), 0
    shards = sorted(glob.glob(os.path.join(shard_dir, "*.tar")))
    if not shards:
        raise RuntimeError(f"{shard_dir}: no .tar shards")
    ds = (wds.WebDataset(shards, shardshuffle=len(shards), seed=1, empty_check=False)
          .shuffle(1000)
          .decode(tv_image if image == "tv" else image)
          .to_tuple("jpg", "cls", "json")
          .batched(BATCH))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    for x, y, meta in dl:
        assert x.dtype == torch.uint8 and x.dim() == 4 and x.shape[1] == 3, (x.dtype, x.shape)
        assert len(y) == x.shape[0] and len(meta) == x.shape[0] and isinstance(meta[0], dict)
        n += x.shape[0]
    del dl  # workers exit (and are reaped) before the CPU is read
    wall = time.perf_counter() - t0
    return n, wall, cpu_s() - c0, importlib.metadata.version("webdataset")


def main():
    shard_dir, workers, image = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        import torch
        n, wall, cpu, version = run(shard_dir, workers, image)
    except Exception as e:  # one line for the table; the trace for whoever runs it by hand
        import traceback
        traceback.print_exc()
        print(f"webdataset failed: {type(e).__name__}: {e}".splitlines()[0][:200], file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"workers": workers, "image": image, "samples": n,
                      "samples_per_s": n / wall, "cpu_s_per_1000": cpu / n * 1000,
                      "version": version, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
