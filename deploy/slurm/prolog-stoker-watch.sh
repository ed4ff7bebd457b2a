#!/bin/sh
# Slurm prolog: record that job $SLURM_JOB_ID holds the node's GPUs
# $SLURM_JOB_GPUS in the dcgm-exporter job-mapping directory that
# `stoker watch --mapping-dir` (and dcgm-exporter) read: one file per GPU
# index, one job id a line. Install as (or call from) the node's Prolog.
# Never fails the job: a mapping problem only costs attribution.
dir=${STOKER_MAPPING_DIR:-/run/stoker/job-mapping}
job=${SLURM_JOB_ID:-}
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[ -n "$job" ] && [ -n "$gpus" ] || exit 0
case $job in *[!0-9_A-Za-z.-]*) exit 0 ;; esac
mkdir -p "$dir" 2>/dev/null || exit 0
(
  flock -w 10 9 || exit 0
  for g in $(echo "$gpus" | tr ',' ' '); do
    case $g in '' | *[!0-9.]*) continue ;; esac
    f="$dir/$g"
    tmp="$dir/.$g.$$"
    { [ -f "$f" ] && grep -vx -- "$job" "$f"; echo "$job"; } >"$tmp" 2>/dev/null && mv -f "$tmp" "$f"
    rm -f "$tmp"
  done
) 9>"$dir/.lock"
exit 0
