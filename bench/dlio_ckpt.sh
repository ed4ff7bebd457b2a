#!/usr/bin/env bash
# K5: stoker bench's checkpoint emulation against DLIO's on the same scaled
# configs (llama_7b, unet3d with checkpoints): see bench/dlio_ckpt.py.
exec /usr/bin/python3 "$(dirname "$0")/dlio_ckpt.py" "$@"
