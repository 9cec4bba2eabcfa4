"""Mutation fuzzing of the decoder: every mutated file must yield a verdict, never an exception.

Both formats: `gauntlet/1` and `gauntlet/2` originals, byte-level mutations, structure-aware rewrites
of the header JSON, and edits of the `gauntlet/2` index streams aimed at each of their checks.
The CI test runs a few thousand cases; the long run is `python -m tests.fuzz_decoder --cases 100000`.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import time
from collections import Counter

import numpy as np
from safetensors.numpy import load, save

from scoring.decoder import UNEXPECTED, Expected, decode_submission
from scoring.wire import FORMAT, FORMAT_V2
from tests.codec_fixtures import SPEC, make_file


def _mutate_header(data: bytes, rng: random.Random) -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    header = bytearray(data[8 : 8 + n])
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(header))
        header[pos] = rng.choice(b'0123456789[]{},:"-eE. ') if rng.random() < 0.7 else rng.randrange(256)
    return data[:8] + bytes(header) + data[8 + n :]


_HOSTILE_SHAPES = (
    "[" + "9" * 5000 + "]",
    "[" + ", ".join(["1"] * 40) + "]",
    f"[0, {2**64 - 1}]",
    f"[{2**64 - 1}, 0]",
    f"[{2**63}]",
    "[-1]",
    "[]",
    "[1e400]",
    "[[4]]",
)


def _restructure_header(data: bytes, rng: random.Random) -> bytes:
    """Structure-aware: rewrite one entry's shape/dtype/offsets or flood the header with tensors."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    end = len(data) - 8 - n
    choice = rng.randrange(6)
    if choice == 0:
        header[name]["shape"] = "@@"
    elif choice == 1:
        header[name]["shape"] = [rng.choice([0, 1, 2**32, 2**64 - 1]) for _ in range(rng.randint(0, 70))]
    elif choice == 2:
        header[name]["data_offsets"] = [rng.randrange(end + 2), rng.choice([end, 2**64 - 1, -1])]
    elif choice == 3:
        header[name]["dtype"] = rng.choice(["F64", "BOOL", "", 7, None, "U8", "F16"])
    elif choice == 4:  # thousands of tensors: empty, or aliasing real bytes
        for i in range(rng.choice([10, 1000, 10_000])):
            header[f"{name}{i}"] = {"dtype": "U8", "shape": [0], "data_offsets": [end, end]}
    else:
        header[name] = rng.choice([None, [], "x", {"dtype": "U8"}, "@@"])
    raw = json.dumps(header).replace('"@@"', rng.choice(_HOSTILE_SHAPES)).encode()
    return struct.pack("<Q", len(raw)) + raw + data[8 + n :]


def _edit_stream(stream: bytearray, rng: random.Random) -> None:
    """Edits aimed at each gauntlet/2 index-stream check: k, code count, padding, gap sums, length."""
    if not stream:
        stream.append(rng.randrange(256))
    op = rng.randrange(6)
    if op == 0:  # the Rice parameter
        stream[0] = rng.choice([0, 1, 5, 11, 12, 255, rng.randrange(256)])
    elif op == 1:  # one bit anywhere
        stream[rng.randrange(len(stream))] ^= 1 << rng.randrange(8)
    elif op == 2:  # trailing bytes
        stream.extend(rng.choice([b"\x00", b"\x80", rng.randbytes(rng.randint(1, 4))]))
    elif op == 3 and len(stream) > 1:
        del stream[rng.randrange(1, len(stream)) :]
    elif op == 4:  # a run of zero or one bits: long unary codes, gaps overrunning the chunk
        start = rng.randrange(len(stream))
        stream[start : start + rng.randint(1, 8)] = bytes([rng.choice([0, 0xFF])]) * rng.randint(1, 8)
    else:
        stream[:] = rng.randbytes(rng.randint(0, 2 * len(stream)))


def _mutate_stream(data: bytes, rng: random.Random) -> bytes:
    """Rebuild the file with one `NAME.idx` edited, its metadata kept (the signature then fails)."""
    (n,) = struct.unpack("<Q", data[:8])
    metadata = json.loads(data[8 : 8 + n])["__metadata__"]
    tensors = load(data)
    name = rng.choice(sorted(k for k in tensors if k.endswith(".idx")))
    stream = bytearray(tensors[name].tobytes())
    for _ in range(rng.randint(1, 3)):
        _edit_stream(stream, rng)
    tensors[name] = np.frombuffer(bytes(stream), dtype=np.uint8)
    return save(tensors, metadata=metadata)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random structural or byte-level mutation of a valid file."""
    b = bytearray(data)
    kind = rng.randrange(11)
    if kind == 0:  # flip bits anywhere
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del b[rng.randrange(len(b)) :]
    elif kind == 2:  # insert junk
        pos = rng.randrange(len(b) + 1)
        b[pos:pos] = rng.randbytes(rng.randint(1, 64))
    elif kind == 3:  # rewrite the header length
        b[:8] = struct.pack("<Q", rng.choice([0, 1, len(b), len(b) - 8, 2**63, rng.randrange(2**32)]))
    elif kind == 4:
        return _mutate_header(data, rng)
    elif kind == 5:  # overwrite a run of payload bytes
        (n,) = struct.unpack("<Q", data[:8])
        start = rng.randrange(8 + n, len(b))
        end = min(len(b), start + rng.randint(1, 32))
        b[start:end] = bytes(
            rng.choice([0x00, 0xFF, 0x7C, 0x7E, rng.randrange(256)]) for _ in range(end - start)
        )
    elif kind == 6:  # duplicate a slice
        i, j = sorted(rng.randrange(len(b)) for _ in range(2))
        b[j:j] = b[i:j][:256]
    elif kind == 7:
        return _restructure_header(data, rng)
    elif kind in (8, 9):
        return _mutate_stream(data, rng)
    else:  # random bytes of plausible size
        return rng.randbytes(rng.randint(0, len(data)))
    return bytes(b)


def run(cases: int, seed: int) -> Counter[str]:
    rng = random.Random(seed)
    originals = [make_file(s, fmt=FORMAT) for s in range(2)] + [make_file(s, fmt=FORMAT_V2) for s in range(4)]
    outcomes: Counter[str] = Counter()
    for i in range(cases):
        data = mutate(rng.choice(originals), rng)
        # half the cases skip the signature so that mutations reach the schema and content checks
        expect = Expected(verify_signature=bool(i % 2))
        result = decode_submission(data, SPEC, expect)
        assert (result.update is None) == (not result.verdict.ok)
        # the catch-all boundary turning an exception into a verdict counts as a crash here
        crashed = result.verdict.detail.startswith(UNEXPECTED)
        outcomes["crash" if crashed else result.verdict.reason or "ok"] += 1
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    outcomes = run(args.cases, args.seed)
    elapsed = time.perf_counter() - start
    sys.stdout.write(
        json.dumps(
            {
                "cases": args.cases,
                "crashes": outcomes["crash"],
                "seconds": round(elapsed, 1),
                "reasons": outcomes,
            }
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
