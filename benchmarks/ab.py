"""A/B timing of two copies of attnlab side by side in one run, for a change that must not slow `make bench` down.

For each function and size of `make bench` (H = 8, D = 64, float32, one sequence), it runs the old and the new copy
in fresh subprocesses one right after the other, `--rounds` times, the order alternating every round. Each subprocess
warms up once and times `--repeats` calls. A ratio new/old is taken per round, from two runs seconds apart under the
same load, and the median over the rounds is reported with its range.

    python benchmarks/ab.py OLD_SRC NEW_SRC --rounds 5 --sizes 1024 2048 4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import statistics, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import attnlab
H, D = 8, 64
name, S, repeats = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(S)
q, k, v, dout = rng.standard_normal((4, 1, H, S, D), dtype=np.float32)
if name == "tiled_attention_backward":
    out, lse = attnlab.tiled_attention(q, k, v, return_lse=True)
fn = {"attention": lambda: attnlab.attention(q, k, v),
      "tiled_attention": lambda: attnlab.tiled_attention(q, k, v),
      "tiled_attention_backward": lambda: attnlab.tiled_attention_backward(q, k, v, out, dout, lse),
      "attention_backward": lambda: attnlab.attention_backward(q, k, v, dout)}[name]
fn()
times = []
for _ in range(repeats):
    t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
assert attnlab.__file__.startswith(sys.argv[1])
print(statistics.median(times))
"""


def run(src, name, S, repeats) -> float:
    proc = subprocess.run([sys.executable, "-c", CHILD, src, name, str(S), str(repeats)], capture_output=True,
                          text=True, check=True)
    return float(proc.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--functions", nargs="+",
                        default=["attention", "tiled_attention", "tiled_attention_backward", "attention_backward"])
    args = parser.parse_args(argv)
    print(f"{'':<34} {'old s (median)':>14} {'new s (median)':>14} {'new/old (median of rounds)':>27}  range",
          flush=True)
    for S in args.sizes:
        for name in args.functions:
            ratios, times = [], {"old": [], "new": []}
            for r in range(args.rounds):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                got = {side: run(getattr(args, side), name, S, args.repeats) for side in order}
                ratios.append(got["new"] / got["old"])
                for side in order:
                    times[side].append(got[side])
            print(f"{name + f' S={S}':<34} {statistics.median(times['old']):14.3f} "
                  f"{statistics.median(times['new']):14.3f} {statistics.median(ratios):27.3f}  "
                  f"{min(ratios):.3f}-{max(ratios):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
