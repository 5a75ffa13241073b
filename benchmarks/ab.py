"""A/B timing of two copies of attnlab, side by side in one run (for a change that must not slow `make bench` down).

Each round runs the old and the new copy in fresh subprocesses, one after the other (the order alternates every round),
and each subprocess times attention, the tiled forward and both backward passes at `make bench`'s shapes (H = 8,
D = 64, float32, one sequence). The ratio new/old is taken per round, so that both sides of a ratio ran under the same
load, and the median over rounds is reported.

    python benchmarks/ab.py OLD_SRC NEW_SRC --rounds 5 --sizes 1024 2048 4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import attnlab
H, D = 8, 64
sizes, plain_max, repeats = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def median_time(fn):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return statistics.median(times)

result = {"file": attnlab.__file__}
for S in sizes:
    rng = np.random.default_rng(S)
    q, k, v, dout = rng.standard_normal((4, 1, H, S, D), dtype=np.float32)
    out, lse = attnlab.tiled_attention(q, k, v, return_lse=True)
    result[f"attention S={S}"] = median_time(lambda: attnlab.attention(q, k, v))
    result[f"tiled_attention S={S}"] = median_time(lambda: attnlab.tiled_attention(q, k, v))
    result[f"tiled_attention_backward S={S}"] = median_time(
        lambda: attnlab.tiled_attention_backward(q, k, v, out, dout, lse))
    if S <= plain_max:
        result[f"attention_backward S={S}"] = median_time(lambda: attnlab.attention_backward(q, k, v, dout))
print(json.dumps(result))
"""


def run(src, sizes, plain_max, repeats):
    proc = subprocess.run([sys.executable, "-c", CHILD, src, json.dumps(sizes), str(plain_max), str(repeats)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--plain-backward-max", type=int, default=4096)
    args = parser.parse_args(argv)
    ratios, times = {}, {"old": {}, "new": {}}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        got = {side: run(getattr(args, side), args.sizes, args.plain_backward_max, args.repeats) for side in order}
        for name in got["old"]:
            if name == "file":
                continue
            ratios.setdefault(name, []).append(got["new"][name] / got["old"][name])
            for side in ("old", "new"):
                times[side].setdefault(name, []).append(got[side][name])
        print(f"round {r + 1}: " + ", ".join(f"{n} {ratios[n][-1]:.3f}" for n in ratios), flush=True)
    print(f"\n{'':<36} {'old s (median)':>14} {'new s (median)':>14} {'new/old (median of rounds)':>27}  range")
    for name, rs in ratios.items():
        print(f"{name:<36} {statistics.median(times['old'][name]):14.3f} {statistics.median(times['new'][name]):14.3f} "
              f"{statistics.median(rs):27.3f}  {min(rs):.3f}-{max(rs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
