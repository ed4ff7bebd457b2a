"""P1's anchors: the same ResNet-50 input pipeline as bench/python.py's P1
(labelled JPEGs in class folders, decode, RandomResizedCrop to 224 with
bilinear antialiased resizing, random horizontal flip, uint8 CHW batches of
64 and their labels), through the libraries a user would otherwise pick,
each used as its own documentation shows:

  dali  NVIDIA DALI's CPU pipeline (device_id=None) as DALI's own ResNet-50
        examples build it with dali_cpu=True: fn.readers.file over the class
        folders, fn.decoders.image_random_crop on the CPU (it decodes only
        the crop's region), fn.resize to 224 (linear, antialiased),
        fn.crop_mirror_normalize for the random flip and CHW layout (uint8,
        no normalization), fed to PyTorch through
        nvidia.dali.plugin.pytorch.DALIGenericIterator. The crop's area and
        aspect ranges are torchvision's (0.08-1, 3/4-4/3), not the example's.
  dali_plain  the same through DALI's separate operators: fn.decoders.image
        (whole image), fn.random_resized_crop, fn.flip, fn.transpose.
  spdl  Meta's SPDL: torchvision's ImageFolder listing with spdl.io's
        demux_image + decode_packets as its loader (crop, scale and flip in
        the decoder's FFmpeg filter graph), run by spdl.pipeline's
        PipelineBuilder with `threads` concurrent decodes, batched by
        spdl.io.convert_frames + to_torch (a CHW view of the NHWC batch, as
        SPDL's own ImageNet examples hand it on).

Run by bench/python.py in the anchors' environment (.venv-anchors, made by
bench/anchors-setup), one library and thread count per process:

  .venv-anchors/bin/python bench/anchors_p1.py LIB ROOT THREADS SAMPLES
  (LIB: dali, dali_plain or spdl)

The timed region is the one of python.py's p1_torch and p1_stoker: from
before the dataset is opened (listing, pipeline build) to after the last
batch and the pipeline's teardown, imports excluded. Prints one JSON object:
samples, samples_per_s, cpu_s_per_1000 (this process, all its threads, and
any children), version; or exits non-zero with one line on stderr saying why."""
import json
import math
import os
import random
import resource
import sys
import time

BATCH = 64
SIZE = 224
SCALE = (0.08, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)


def cpu_s():
    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        s = resource.getrusage(who)
        t += s.ru_utime + s.ru_stime
    return t


def check(x, y):
    import torch
    assert x.dtype == torch.uint8 and tuple(x.shape[1:]) == (3, SIZE, SIZE), (x.dtype, x.shape)
    assert len(y) == x.shape[0]
    return x.shape[0]


# ---- DALI ---------------------------------------------------------------------

def dali(root, threads, samples, seed=1, plain=False):
    import nvidia.dali
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=BATCH, num_threads=threads, device_id=None, seed=seed)
    def resnet_cpu():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        flip = fn.random.coin_flip(probability=0.5)
        if plain:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.random_resized_crop(images, size=[SIZE, SIZE], random_area=list(SCALE),
                                            random_aspect_ratio=list(RATIO),
                                            interp_type=types.INTERP_LINEAR, antialias=True)
            images = fn.flip(images, horizontal=flip)
            images = fn.transpose(images, perm=[2, 0, 1])
        else:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=list(SCALE),
                                                   random_aspect_ratio=list(RATIO),
                                                   num_attempts=10)
            images = fn.resize(images, resize_x=SIZE, resize_y=SIZE,
                               interp_type=types.INTERP_LINEAR, antialias=True)
            images = fn.crop_mirror_normalize(images, dtype=types.UINT8, output_layout="CHW",
                                              mirror=flip)
        return images, labels

    c0, t0, n, b = cpu_s(), time.perf_counter(), 0, None
    pipe = resnet_cpu()
    pipe.build()
    it = DALIGenericIterator([pipe], ["data", "label"], reader_name="Reader", auto_reset=True,
                             last_batch_policy=LastBatchPolicy.DROP)
    while n < samples:
        for b in it:
            n += check(b[0]["data"], b[0]["label"])
            if n >= samples:
                break
    del it, pipe, b
    wall = time.perf_counter() - t0
    return n, wall, cpu_s() - c0, nvidia.dali.__version__


# ---- SPDL ---------------------------------------------------------------------

def crop_params(w, h, rng):
    """torchvision's RandomResizedCrop.get_params, on the image's size alone
    (SPDL decodes after choosing the crop: it is part of the filter graph)."""
    area = w * h
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        ar = math.exp(rng.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * ar)))
        ch = int(round(math.sqrt(target / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    r = w / h  # fallback: a centre crop
    if r < RATIO[0]:
        cw, ch = w, int(round(w / RATIO[0]))
    elif r > RATIO[1]:
        cw, ch = int(round(h * RATIO[1])), h
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def spdl(root, threads, samples, seed=1):
    import importlib.metadata
    import threading
    import spdl.io
    import torch
    from spdl.pipeline import PipelineBuilder
    from torchvision.datasets import ImageFolder

    local = threading.local()

    def rng():
        if not hasattr(local, "rng"):
            local.rng = random.Random(seed * 1000003 + threading.get_ident())
        return local.rng

    def load(path):
        packets = spdl.io.demux_image(path)
        r = rng()
        x, y, cw, ch = crop_params(packets.width, packets.height, r)
        flip = ",hflip" if r.random() < 0.5 else ""
        desc = (f"crop={cw}:{ch}:{x}:{y},scale={SIZE}:{SIZE}:flags=bilinear{flip},"
                f"format=rgb24")
        return spdl.io.decode_packets(packets, filter_desc=desc)

    def collate(items):
        frames, labels = zip(*items)
        x = spdl.io.to_torch(spdl.io.convert_frames(list(frames))).permute(0, 3, 1, 2)
        return x, torch.tensor(labels)

    c0, t0, n = cpu_s(), time.perf_counter(), 0
    ds = ImageFolder(root, loader=load)
    order = random.Random(seed)

    def source():
        while True:  # epochs, each in a new order, until the consumer stops
            idx = list(range(len(ds)))
            order.shuffle(idx)
            yield from idx

    pipeline = (PipelineBuilder()
                .add_source(source())
                .pipe(ds.__getitem__, concurrency=threads)
                .aggregate(BATCH, drop_last=True)
                .pipe(collate)
                .add_sink(threads)
                .build(num_threads=threads))
    with pipeline.auto_stop():
        for x, y in pipeline:
            n += check(x, y)
            if n >= samples:
                break
    del pipeline
    wall = time.perf_counter() - t0
    return n, wall, cpu_s() - c0, importlib.metadata.version("spdl")


def main():
    lib, root, threads, samples = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    run = {"dali": dali, "dali_plain": lambda *a: dali(*a, plain=True), "spdl": spdl}[lib]
    try:
        import torch
        n, wall, cpu, version = run(root, threads, samples)
    except Exception as e:  # one line for the table; the trace for whoever runs it by hand
        import traceback
        traceback.print_exc()
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        print(f"{lib} failed: {msg}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"lib": lib, "threads": threads, "samples": n, "samples_per_s": n / wall,
                      "cpu_s_per_1000": cpu / n * 1000, "version": version,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
