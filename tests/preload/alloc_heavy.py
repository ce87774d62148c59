"""Allocation-heavy Python workload for the LD_PRELOAD tests.

CPython's small-object allocator sits on malloc for arenas and for everything over 512 bytes
(big strings, list and dict tables, which realloc as they grow), so this exercises malloc,
realloc and free at volume. Prints a checksum over everything it built; compare.sh requires the
same output with and without the preloaded allocator. Deterministic: no hashing of str keys
reaches the output (PYTHONHASHSEED would change set/dict order otherwise).
"""
import json
import queue
import sys
import threading
import zlib

N = 300_000


def build(seed):
    records = {}
    for i in range(N // 3):
        k = f"k{seed}-{i}"
        records[k] = {"id": i, "name": k * (1 + i % 7), "tags": [i % 13, i % 17, str(i)]}
    return records


def digest(obj, crc=0):
    return zlib.crc32(json.dumps(obj, sort_keys=True).encode(), crc)


def main():
    crc = 0
    # Dicts of dicts with lists and strings of many sizes; then drop every other one and
    # rebuild, so freed memory is reused while much is still live.
    records = build(1)
    for i in range(0, N // 3, 2):
        del records[f"k1-{i}"]
    records.update(build(2))
    crc = digest(sorted(records.items()), crc)

    # Long strings grown piece by piece (realloc) and big lists.
    text = ""
    for i in range(20_000):
        text += chr(97 + i % 26) * (i % 5 + 1)
    squares = [i * i for i in range(N)]
    crc = zlib.crc32(text.encode(), crc)
    crc = zlib.crc32(str(sum(squares)).encode(), crc)

    # JSON round trip of a large nested structure.
    doc = json.loads(json.dumps({"rows": [[i, str(i), i / 7] for i in range(50_000)]}))
    if len(doc["rows"]) != 50_000 or doc["rows"][49_999][1] != "49999":
        sys.exit("json round trip lost data")
    crc = digest(doc, crc)

    # Objects created on producer threads and freed on the consumer (cross-thread frees).
    q = queue.Queue(maxsize=1000)
    totals = []

    def producer(t):
        for i in range(20_000):
            q.put([t, i, "x" * (i % 300)])
        q.put(None)

    def consumer(producers):
        done, total = 0, 0
        while done < producers:
            item = q.get()
            if item is None:
                done += 1
            else:
                total += item[1] + len(item[2])
        totals.append(total)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(3)]
    threads.append(threading.Thread(target=consumer, args=(3,)))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    crc = zlib.crc32(str(totals).encode(), crc)

    print(f"records {len(records)} text {len(text)} rows {len(doc['rows'])} totals {totals}")
    print(f"checksum {crc:08x}")


main()
