#!/bin/sh
# Slurm epilog: remove job $SLURM_JOB_ID from the job-mapping files of the
# GPUs it held (files left empty are removed), so that `stoker watch` stops
# charging those GPUs to it. Install as (or call from) the node's Epilog.
dir=${STOKER_MAPPING_DIR:-/run/stoker/job-mapping}
job=${SLURM_JOB_ID:-}
[ -n "$job" ] && [ -d "$dir" ] || exit 0
(
  flock -w 10 9 || exit 0
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    g=$(basename "$f")
    case $g in *[!0-9.]*) continue ;; esac
    grep -qx -- "$job" "$f" || continue
    tmp="$dir/.$g.$$"
    grep -vx -- "$job" "$f" >"$tmp"
    if [ -s "$tmp" ]; then mv -f "$tmp" "$f"; else rm -f "$tmp" "$f"; fi
  done
) 9>"$dir/.lock"
exit 0
