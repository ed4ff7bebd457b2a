#!/usr/bin/env bash
# Device ceilings: stoker doctor against fio's depth x jobs curve, and K1
# (checkpoint save over doctor's sequential write ceiling): see bench/ceilings.py.
exec /usr/bin/python3 "$(dirname "$0")/ceilings.py" "$@"
