#!/usr/bin/env bash
# E3: `stoker gen` write rate against the device's sequential write ceiling
# measured in the same run (see bench/gen_write.py). ROUNDS=N sets the
# rounds, GEN_WRITE_TOTAL the bytes per timed write, GEN_WRITE_DIR where.
exec /usr/bin/python3 "$(dirname "$0")/gen_write.py" --rounds "${ROUNDS:-3}" \
  --total "${GEN_WRITE_TOTAL:-2GiB}" ${GEN_WRITE_DIR:+--dir "$GEN_WRITE_DIR"} "$@"
