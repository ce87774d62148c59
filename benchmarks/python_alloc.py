"""python_alloc: a real program under LD_PRELOAD. CPython allocates every object; objects above
512 B (big strings, bytes, list and dict tables) go straight to malloc/realloc/free, the rest
through pymalloc arenas taken from malloc. Builds records, round-trips them through JSON, grows
bytearrays and lists, and checks that every round trip gives back what went in.

    /usr/bin/python3 python_alloc.py [rounds] (default 6; the smoke run passes 1)
Exits 3 when a round trip does not match (data corrupted under the allocator).
"""
import hashlib
import json
import random
import sys
import time


def make_records(rng, n):
    records = []
    for i in range(n):
        width = rng.choice((8, 40, 300, 2000, 9000))  # strings from pymalloc-sized to malloc-sized
        records.append({
            "id": i,
            "name": "n%06d-" % i + "x" * rng.randrange(width),
            "tags": [rng.randrange(1000) for _ in range(rng.randrange(1, 40))],
            "score": rng.random(),
        })
    return records


def fail():
    print("CORRUPTION workload=python: round trip mismatch", file=sys.stderr)
    sys.exit(3)


def grow_bytes(rng, n):
    """bytearray appends: realloc growth through the whole size range."""
    buf = bytearray()
    pieces = hashlib.sha256()
    for _ in range(n):
        piece = bytes([rng.randrange(256)]) * rng.randrange(1, 700)
        buf += piece
        pieces.update(piece)
    if hashlib.sha256(buf).digest() != pieces.digest():
        fail()
    return len(buf)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    rng = random.Random(12345)
    t0 = time.perf_counter()
    total = 0
    for _ in range(rounds):
        records = make_records(rng, 6000)
        text = json.dumps(records)
        if json.loads(text) != records:
            fail()
        index = {r["name"]: r for r in records}  # dict table growth, string hashing
        if len(index) != len(records):
            fail()
        records.sort(key=lambda r: (r["score"], r["id"]))
        total += grow_bytes(rng, 20000)
        chunks = [text[i:i + rng.randrange(16, 5000)] for i in range(0, len(text), 2500)]
        joined = "".join(chunks)  # many temporary strings, then one big one
        total += len(joined)
        del records, text, index, chunks, joined
    dt = time.perf_counter() - t0
    print("RESULT workload=python case=json+bytes threads=1 metric=time value=%.6g unit=s" % dt)
    print("RESULT workload=python case=json+bytes threads=1 metric=bytes_built value=%d unit=B" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
