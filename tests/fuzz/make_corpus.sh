#!/bin/sh
# Regenerate the fuzz seed corpora (tests/fuzz/corpus/NAME/) with the stoker
# CLI and, where present, Python's tarfile and NumPy. Usage: make_corpus.sh
# [path/to/stoker]; run from anywhere. Seeds stay small on purpose. Only the
# corpora written here are replaced: the others (ckpt_manifest, image, listing,
# manifest, mig_online, parva, s3list, sim_jobs, simcsv, size, sources, watch) hold hand-made
# seeds and inputs the fuzzers found, and stay as they are.
set -e
here=$(cd "$(dirname "$0")" && pwd)
STK=${1:-$here/../../build/stoker}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
c=$here/corpus
rm -rf "$c/tfrecord" "$c/wds" "$c/npy" "$c/npz" "$c/mds" "$c/json" "$c/megatron" "$c/npy_tokens"
mkdir -p "$c/tfrecord" "$c/wds" "$c/npy" "$c/npz" "$c/mds" "$c/json" "$c/megatron" "$c/npy_tokens"

"$STK" gen "$tmp/t1" --format tfrecord --samples 3 --size 40 --size-stdev 20 -q
cp "$tmp/t1/shard-00000.tfrecord" "$c/tfrecord/raw3"
{ printf 'IDX'; cat "$tmp/t1/shard-00000.tfrecord.idx"; printf '\0'; cat "$tmp/t1/shard-00000.tfrecord"; } > "$c/tfrecord/idx3"
"$STK" gen "$tmp/t2" --format tfrecord --samples 2 --size 30 --classes 5 -q
cp "$tmp/t2/shard-00000.tfrecord" "$c/tfrecord/example2"

"$STK" gen "$tmp/w1" --format wds --samples 2 --size 30 --classes 3 -q
cp "$tmp/w1/shard-00000.tar" "$c/wds/cls2.tar"
if [ -x "$PY" ]; then
  (cd "$tmp" && $PY -c "
import tarfile, io
t = tarfile.open('pax.tar', 'w', format=tarfile.PAX_FORMAT)
for k in ['d/' + 'x' * 110 + '/s1', 'd/s2']:
    for e, b in [('jpg', b'JJJJ'), ('cls', b'1')]:
        i = tarfile.TarInfo(k + '.' + e); i.size = len(b); t.addfile(i, io.BytesIO(b))
t.close()
t = tarfile.open('gnu.tar', 'w', format=tarfile.GNU_FORMAT)
i = tarfile.TarInfo('g/' + 'y' * 120 + '.txt'); i.size = 3; t.addfile(i, io.BytesIO(b'abc'))
t.close()")
  cp "$tmp/pax.tar" "$tmp/gnu.tar" "$c/wds/"
fi

"$STK" gen "$tmp/n1" --format npy --samples 1 --size 24 -q
cp "$tmp/n1/shard-00000000.npy" "$c/npy/u8.npy"
"$STK" gen "$tmp/z1" --format npz --samples 1 --size 24 --classes 4 -q
cp "$tmp/z1/shard-00000000.npz" "$c/npz/stored.npz"
"$STK" gen "$tmp/z3" --format npz --samples 3 --samples-per-shard 3 --size 24 --classes 4 -q
cp "$tmp/z3/shard-00000000.npz" "$c/npz/dlio3.npz"
if [ -x "$PY" ] && $PY -c 'import numpy' 2>/dev/null; then
  (cd "$tmp" && $PY -c "
import numpy as np
np.save('f.npy', np.arange(6, dtype='<f4').reshape(2, 3))
np.save('s.npy', np.zeros(2, dtype=[('a', '<i4'), ('b', 'u1')]))
np.savez('a.npz', x=np.arange(10, dtype=np.uint8), y=np.array([2]))
np.savez_compressed('c.npz', x=np.zeros(40, np.float32), y=np.array([1]))
np.savez('d.npz', x=np.arange(24, dtype='<i2').reshape(2, 3, 4), y=[0, 1, 2, 3])")
  cp "$tmp/f.npy" "$tmp/s.npy" "$c/npy/"
  # npy token files: every integer dtype, a big-endian and a 2-D one, and
  # pairs (two files in one input) that agree and disagree on the dtype.
  (cd "$tmp" && $PY -c "
import numpy as np
for t in ['u1', 'i1', '<u2', '<i2', '<u4', '<i4', '<u8', '<i8', '>i4']:
    np.save('tok_' + t.strip('<>') + ('_be' if t[0] == '>' else '') + '.npy',
            np.array([0, 1, 7, 100, 3], dtype=t))
np.save('tok_2d.npy', np.arange(6, dtype='<i4').reshape(2, 3))
np.save('p1.npy', np.array([5, 6], dtype='<u2'))
np.save('p2.npy', np.array([7], dtype='<u2'))
np.save('p3.npy', np.array([7], dtype='<i8'))")
  cp "$tmp"/tok_*.npy "$c/npy_tokens/"
  cat "$tmp/p1.npy" "$tmp/p2.npy" > "$c/npy_tokens/pair_same"
  cat "$tmp/p1.npy" "$tmp/p3.npy" > "$c/npy_tokens/pair_mixed"
  cp "$tmp/a.npz" "$tmp/c.npz" "$tmp/d.npz" "$c/npz/"
fi

"$STK" gen "$tmp/m1" --format mds --samples 3 --size 20 --classes 2 -q
{ cat "$tmp/m1/index.json"; printf '\0'; cat "$tmp/m1/shard.00000.mds"; } > "$c/mds/label3"
"$STK" gen "$tmp/m2" --format mds --samples 2 --size 10 -q
{ cat "$tmp/m2/index.json"; printf '\0'; cat "$tmp/m2/shard.00000.mds"; } > "$c/mds/plain2"
# Token columns as streaming's MDSWriter writes them (ndarray with the dtype
# and shape in each value, ndarray:int32 with the shape in each value, a
# fixed ndarray:uint16:2,2, an int), plain and zstd-compressed (the zstd CLI).
$PY - "$tmp/m3" <<'PYEOF'
import json, os, struct, sys
d = sys.argv[1]; os.makedirs(d)
cols = [('any', 'ndarray', None), ('fix', 'ndarray:uint16:2,2', 8), ('id', 'int', 8),
        ('tokens', 'ndarray:int32', None)]
samples = []
for i in range(3):
    a = bytes([[8, 33, 66][i], 1 << 2]) + bytes([2 + i]) + bytes(([1, 4, 8][i]) * (2 + i))
    t = bytes([1 << 2, 3 + i]) + b''.join(struct.pack('<i', 100 * i + k) for k in range(3 + i))
    f = b''.join(struct.pack('<H', i + k) for k in range(4))
    samples.append(struct.pack('<II', len(a), len(t)) + a + f + struct.pack('<q', i) + t)
cfg = b'{}'
hdr = 4 + 4 * (len(samples) + 1) + len(cfg)
offs = [hdr]
for s in samples: offs.append(offs[-1] + len(s))
raw = struct.pack('<I', len(samples)) + b''.join(struct.pack('<I', o) for o in offs) + cfg + b''.join(samples)
open(d + '/shard.00000.mds', 'wb').write(raw)
def index(comp, zbytes):
    e = {'column_names': [c[0] for c in cols], 'column_encodings': [c[1] for c in cols],
         'column_sizes': [c[2] for c in cols], 'compression': comp, 'format': 'mds',
         'hashes': [], 'raw_data': {'basename': 'shard.00000.mds', 'bytes': len(raw), 'hashes': {}},
         'samples': len(samples), 'size_limit': 1 << 26, 'version': 2,
         'zip_data': comp and {'basename': 'shard.00000.mds.zstd', 'bytes': zbytes, 'hashes': {}}}
    return json.dumps({'shards': [e], 'version': 2}, sort_keys=True)
open(d + '/plain.json', 'w').write(index(None, 0))
os.system('zstd -q -19 %s/shard.00000.mds -o %s/shard.00000.mds.zstd' % (d, d))
open(d + '/zstd.json', 'w').write(index('zstd', os.path.getsize(d + '/shard.00000.mds.zstd')))
PYEOF
{ cat "$tmp/m3/plain.json"; printf '\0'; cat "$tmp/m3/shard.00000.mds"; } > "$c/mds/tokens3"
{ cat "$tmp/m3/zstd.json"; printf '\0'; cat "$tmp/m3/shard.00000.mds.zstd"; } > "$c/mds/zstd3"

# Megatron pairs: the .idx's length (two bytes, little-endian), the .idx,
# then the .bin (tests/fuzz/fuzz_megatron.c).
mega() {
  "$STK" gen "$tmp/$1" --format megatron --samples "$2" --doc-len 4 --doc-len-stdev 3 \
    --dtype "$3" --vocab 100 -q
  n=$(wc -c < "$tmp/$1/shard-00000.idx")
  { printf "$(printf '\\%03o\\%03o' $((n % 256)) $((n / 256)))"; cat "$tmp/$1/shard-00000.idx";
    cat "$tmp/$1/shard-00000.bin"; } > "$c/megatron/$1"
}
mega u16 5 uint16
mega i32 3 int32
mega i64 2 int64
mega u8 6 uint8

cp "$tmp/m1/index.json" "$c/json/index.json"
printf '[1, -2.5e-3, true, false, null, "a\\u00e9\\ud83d\\ude00\\n", {"k": [[], {}]}]' > "$c/json/mixed"
printf '{"a": {"b": {"c": [0, 1e400, 9223372036854775807, 9223372036854775808]}}}' > "$c/json/numbers"
echo "corpus written to $c"
