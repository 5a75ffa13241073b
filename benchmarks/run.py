"""Benchmark attnlab's attention against this machine's limits (`make bench`).

For H = 8 heads of width D = 64 in float32 and growing context S, it measures `attnlab.attention` (which materialises the
scores) and `attnlab.tiled_attention` (which never does): median time, effective GFLOP/s, peak memory (tracemalloc) and
the largest error against a float64 reference. In the same run it measures the two limits that bound them, this
machine's float32 matmul rate and its `np.exp` rate per core, and reports each time as a multiple of the floor

    floor = (the two matmuls, 4·H·S²·D FLOPs, at the measured matmul rate) + (H·S² exps spread over all cores).

Both rates are measured again before and after each contender's runs, and its time is divided by the floor measured
around it, so that a shared machine whose speed drifts slows both alike (`Floor`, `in_block`). Both sides of the ratio
are the same statistic, the fastest of several runs: a reading of the floor is the fastest of its runs, and x floor
divides a contender's fastest run by it. Other tenants of a shared machine only ever slow a run, so the fastest run
is the closest to what the code itself costs; the median, which adds whatever the neighbours did during the runs, is
reported beside it (`x floor (median)`).

If PyTorch is installed, `torch.nn.functional.scaled_dot_product_attention` on the CPU is measured as a peer.

Two kinds of sgemm kernel, side by side: the passes run in child processes, once with OpenBLAS's own choice of kernel
for this CPU and once with `OPENBLAS_CORETYPE` forced to another (Haswell's AVX2 kernel on an AVX-512 machine,
Sandybridge's AVX kernel on an AVX2 one; `--coretypes` picks others), alternating per size so that both see the same
load. Each child measures its own matmul rate, so each time is a multiple of the floor of its own kernel.

The backward pass: `attnlab.attention_backward` (which holds the whole weights) and `attnlab.tiled_attention_backward`
(which keeps only the log-sum-exp and recomputes each tile): median time, peak memory, the largest error of dq, dk, dv
against float64, and the tiled backward's time as a multiple of its own forward
(`tiled_attention(..., return_lse=True)`), the two timed alternately in the same loop so that a busy machine slows both
alike. It also times every notebook in a
fresh kernel and the notebook suite under nbval. Results: a table on stdout,
benchmarks/results/bench.json and benchmarks/results/bench.png.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc

import numpy as np

import attnlab
from attnlab._parallel import workers

ROOT = pathlib.Path(__file__).resolve().parents[1]
H, D = 8, 64
# tiled_attention runs with its default tile sizes
BLOCKS = {name: p.default for name, p in inspect.signature(attnlab.tiled_attention).parameters.items() if name in ("Br", "Bc")}
BACKWARD_BLOCKS = {name: p.default for name, p in inspect.signature(attnlab.tiled_attention_backward).parameters.items()
                   if name in ("Br", "Bc")}


def median_time(fn, repeats: int, best=False) -> float:
    """The median time of ``repeats`` runs after a warm-up (with ``best``, the shortest of the runs)."""
    fn()  # warm up: page in memory, start threads
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if best else statistics.median(times)


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class Floor:
    """The two limits a pass cannot beat, this machine's float32 matmul rate (all cores) and its np.exp rate (per
    core), measured once more before and after every contender's timings.

    A shared machine's speed drifts by tens of percent within a minute (measured here: the 4096 x 4096 matmul took
    between 104 and 196 GFLOP/s in twenty runs back to back), so each contender's times are divided by the floor
    measured around them (``in_block``). ``np.exp`` is measured before the matmul, and 0.5 s after anything else:
    OpenBLAS's threads keep polling for work for a while after a multi-threaded sgemm before they sleep (its
    THREAD_TIMEOUT), and anything run then shares the cores with them (measured here: tiled_attention at S = 4096 took
    0.34-0.39 s right after the sgemm, 0.30-0.33 s 0.3 s later). A reading is the fastest of ``READING_RUNS`` runs of
    each. The operands are made once: a reading allocates nothing.
    """

    N = 4096  # the matmul is N x N by N x N
    EXP_LOOPS = 256  # np.exp over 2^16 cache-resident floats, this many times
    READING_RUNS = 3

    def __init__(self, repeats: int):
        rng = np.random.default_rng(0)
        self.a, self.b = rng.standard_normal((2, self.N, self.N), dtype=np.float32)
        self.product = np.empty_like(self.a)
        self.x = rng.standard_normal(1 << 16, dtype=np.float32)
        self.exps = np.empty_like(self.x)
        self.exp_rates, self.mm_rates = [self.exp_rate_per_core(repeats)], [self.matmul_rate(repeats)]

    def matmul_rate(self, repeats: int, best=False) -> float:
        """FLOP/s of a large float32 matmul on all cores."""
        return 2 * self.N**3 / median_time(lambda: np.matmul(self.a, self.b, out=self.product), repeats, best)

    def exp_rate_per_core(self, repeats: int, best=False) -> float:
        """exps per second of np.exp on one core (numpy's exp is single-threaded), on cache-resident float32 blocks."""
        def run():
            for _ in range(self.EXP_LOOPS):
                np.exp(self.x, out=self.exps)

        return self.x.size * self.EXP_LOOPS / median_time(run, repeats, best)

    def measure(self) -> tuple[float, float]:
        """One more reading of both rates, each the fastest of ``READING_RUNS`` runs: (matmul FLOP/s, exps per second
        per core)."""
        time.sleep(0.5)
        self.exp_rates.append(self.exp_rate_per_core(self.READING_RUNS, best=True))
        self.mm_rates.append(self.matmul_rate(self.READING_RUNS, best=True))
        time.sleep(0.5)
        return self.mm_rates[-1], self.exp_rates[-1]

    @property
    def mm_rate(self) -> float:
        return statistics.median(self.mm_rates)

    @property
    def exp_rate(self) -> float:
        return statistics.median(self.exp_rates)

    @staticmethod
    def seconds(flops: float, exps: float, rates: tuple[float, float]) -> float:
        """The floor of a pass of ``flops`` matmul FLOPs and ``exps`` exponentials at ``rates`` (matmul, exp)."""
        mm, ex = rates
        return flops / mm + exps / (ex * workers())


def in_block(floor: Floor, contenders: dict, repeats: int) -> dict:
    """The contenders ``repeats`` times each, alternately, between two readings of the floor: ``{name: (times,
    rates)}`` with the faster of the two readings of each rate (a lower floor: a drift never flatters a contender).

    A block's runs follow each other closely, as a learner's calls do: in a virtual machine, memory freed and left
    unused for a couple of seconds can be handed back to the host, and then costs a page fault per page again (measured
    here: attention at S = 4096, which allocates 512 MiB, took 0.45-0.50 s back to back but 0.86-1.18 s, most of it
    system time, when each call followed a reading of the floor; with a reading of one matmul and a 0.3 s pause before
    each call, a median of 0.78-0.79 s).
    """
    before = floor.measure()
    for fn in contenders.values():
        fn()  # warm up: page in memory, start threads
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    after = floor.measure()
    rates = tuple(max(x, y) for x, y in zip(before, after))
    return {name: (t, rates) for name, t in times.items()}


def timing(run: tuple, flops: float, exps: float) -> dict:
    """A contender's median and fastest time, and each as a multiple of the floor measured around it (``in_block``):
    ``x_floor`` is the fastest run's, the same statistic as the floor's readings; ``x_floor_median`` the median's."""
    times, rates = run
    seconds, best, floor = statistics.median(times), min(times), Floor.seconds(flops, exps, rates)
    return {"seconds": seconds, "best_seconds": best, "gflops": flops / seconds / 1e9, "floor_seconds": floor,
            "x_floor": best / floor, "x_floor_median": seconds / floor}


def torch_sdpa():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None

    def run(q, k, v):
        with torch.no_grad():
            return F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)).numpy()

    run.version = torch.__version__
    return run


def bench_attention(sizes, repeats: int, floor: Floor) -> list[dict]:
    implementations = {
        "attnlab.attention": lambda q, k, v: attnlab.attention(q, k, v),
        f"attnlab.tiled_attention (Br={BLOCKS['Br']}, Bc={BLOCKS['Bc']})": attnlab.tiled_attention,
    }
    torch_run = torch_sdpa()
    if torch_run is not None:
        implementations[f"torch {torch_run.version} scaled_dot_product_attention (CPU)"] = torch_run
    rows = []
    for S in sizes:
        rng = np.random.default_rng(S)
        q, k, v = rng.standard_normal((3, 1, H, S, D), dtype=np.float32)
        # float64 reference on 64 query rows spread over the sequence (rows are independent without a mask)
        pick = np.linspace(0, S - 1, 64).astype(int)
        reference = attnlab.attention(q[..., pick, :].astype(np.float64), k.astype(np.float64), v.astype(np.float64))
        flops = 4 * H * S * S * D
        for name, fn in implementations.items():
            run = in_block(floor, {name: lambda: fn(q, k, v)}, repeats)[name]
            error = float(np.abs(fn(q, k, v)[..., pick, :] - reference).max())
            peak = None if name.startswith("torch") else peak_bytes(lambda: fn(q, k, v))
            row = {"S": S, "implementation": name, **timing(run, flops, H * S * S), "peak_bytes": peak,
                   "max_error": error}
            rows.append(row)
            print(f"  S={S:<5} {name:<58} {row['best_seconds']:8.3f} s  {row['x_floor']:5.2f}x floor (median "
                  f"{row['seconds']:.3f} s, {row['x_floor_median']:.2f}x)", flush=True)
    return rows


def bench_backward(sizes, repeats: int, plain_max_S: int, floor: Floor) -> list[dict]:
    """The two backward passes, and the tiled forward timed in the same rounds as the tiled backward."""
    tiled_name = f"attnlab.tiled_attention_backward (Br={BACKWARD_BLOCKS['Br']}, Bc={BACKWARD_BLOCKS['Bc']})"
    rows = []
    for S in sizes:
        rng = np.random.default_rng(S)
        q, k, v, dout = rng.standard_normal((4, 1, H, S, D), dtype=np.float32)
        out, lse = attnlab.tiled_attention(q, k, v, return_lse=True)
        # float64 reference: the tiled backward in float64 (memory linear in S; the tests show it equals
        # attention_backward and the loop oracle to ~1e-12)
        q64, k64, v64, dout64 = (a.astype(np.float64) for a in (q, k, v, dout))
        out64, lse64 = attnlab.tiled_attention(q64, k64, v64, return_lse=True)
        reference = attnlab.tiled_attention_backward(q64, k64, v64, out64, dout64, lse64)
        del q64, k64, v64, dout64, out64, lse64

        def forward():
            return attnlab.tiled_attention(q, k, v, return_lse=True)

        def tiled():
            return attnlab.tiled_attention_backward(q, k, v, out, dout, lse)

        def plain():
            return attnlab.attention_backward(q, k, v, dout)

        def error(grads):
            return max(float(np.abs(g - r).max()) for g, r in zip(grads, reference))

        scale_ref = max(float(np.abs(r).max()) for r in reference)
        # alternately, so that the ratio to the forward compares runs under the same load
        runs = in_block(floor, {"forward": forward, "tiled": tiled}, repeats)
        t_fwd = statistics.median(runs["forward"][0])
        # FLOPs: the tiled backward recomputes S = Q Kᵀ, then dV, dP, dQ, dK: five matmuls of 2·S²·D per head
        row = timing(runs["tiled"], 10 * H * S * S * D, H * S * S)
        x_fwd = row["seconds"] / t_fwd
        err = error(tiled())
        rows.append({"S": S, "implementation": tiled_name, **row, "peak_bytes": peak_bytes(tiled),
                     "max_error": err, "max_relative_error": err / scale_ref, "forward_seconds": t_fwd,
                     "x_forward": x_fwd})
        print(f"  S={S:<5} {tiled_name:<58} {row['seconds']:8.3f} s  {x_fwd:5.2f}x its forward "
              f"({t_fwd:.3f} s)", flush=True)
        if S > plain_max_S:
            print(f"  S={S:<5} attnlab.attention_backward skipped: its weights alone would be "
                  f"{attnlab.format_bytes(H * S * S * 4)}", flush=True)
            continue
        # the plain backward runs attention's forward (two matmuls) and then dV, dP, dQ, dK
        row = timing(in_block(floor, {"plain": plain}, repeats)["plain"], 12 * H * S * S * D, H * S * S)
        err = error(plain())
        rows.append({"S": S, "implementation": "attnlab.attention_backward", **row, "peak_bytes": peak_bytes(plain),
                     "max_error": err, "max_relative_error": err / scale_ref, "forward_seconds": None,
                     "x_forward": None})
        print(f"  S={S:<5} {'attnlab.attention_backward':<58} {row['seconds']:8.3f} s", flush=True)
    return rows


def bench_notebooks() -> dict:
    """Each notebook's execution time in a fresh kernel, and the wall time of the notebook suite under nbval."""
    import nbformat
    from nbclient import NotebookClient

    times = {}
    paths = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's start-up chatter is not part of the report
        times[str(path.relative_to(ROOT))] = time.perf_counter() - start
        print(f"  {path.relative_to(ROOT)!s:<50} {times[str(path.relative_to(ROOT))]:6.1f} s", flush=True)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers()), "--dist", "loadscope",
                             "-p", "no:cacheprovider", "notebooks"], cwd=ROOT, capture_output=True, text=True)
    suite = time.perf_counter() - start
    return {"per_notebook_seconds": times, "total_seconds": sum(times.values()), "nbval_suite_wall_seconds": suite,
            "nbval_suite_passed": result.returncode == 0, "nbval_summary": result.stdout.strip().splitlines()[-1:]}


def plot(rows, backward, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    sizes = sorted({r["S"] for r in rows})
    for group, style in ((rows, "o-"), (backward, "s--")):  # forward passes solid, backward passes dashed
        for name in dict.fromkeys(r["implementation"] for r in group):
            mine = [r for r in group if r["implementation"] == name]
            ax_t.loglog([r["S"] for r in mine], [r["seconds"] for r in mine], style, label=name)
            if mine[0]["peak_bytes"] is not None:
                ax_m.loglog([r["S"] for r in mine], [r["peak_bytes"] / 2**20 for r in mine], style, label=name)
    floors = {r["S"]: r["floor_seconds"] for r in rows}
    ax_t.loglog(sizes, [floors[s] for s in sizes], "k:", label="forward floor (matmul rate + exp rate)")
    ax_t.set(title=f"time, H={H}, D={D}, float32", xlabel="context length S", ylabel="seconds (median)")
    ax_m.set(title="peak memory (tracemalloc)", xlabel="context length S", ylabel="MiB")
    for ax in (ax_t, ax_m):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)


def targets(rows, notebooks, backward=()) -> list[tuple[str, bool, str]]:
    at = {r["implementation"].split(" (")[0].split(" ")[0]: r for r in rows if r["S"] == 4096}
    attn, tiled = at.get("attnlab.attention"), at.get("attnlab.tiled_attention")
    out = []
    if attn and tiled:
        out.append(("attention at S=4096 <= 1.5x floor", attn["x_floor"] <= 1.5, f"{attn['x_floor']:.2f}x"))
        out.append(("tiled no slower than attention at S=4096", tiled["seconds"] <= attn["seconds"],
                    f"{tiled['seconds']:.3f} s vs {attn['seconds']:.3f} s"))
        out.append(("tiled peak memory <= 1/32 of attention's", tiled["peak_bytes"] * 32 <= attn["peak_bytes"],
                    f"1/{attn['peak_bytes'] / tiled['peak_bytes']:.0f}"))
        torch_row = at.get("torch")
        if torch_row:
            fastest = max(attn["seconds"], tiled["seconds"])
            out.append(("both faster than torch SDPA (CPU)", fastest < torch_row["seconds"],
                        f"{fastest:.3f} s vs {torch_row['seconds']:.3f} s"))
    back = {r["implementation"].split(" (")[0]: r for r in backward if r["S"] == 4096}
    plain_b, tiled_b = back.get("attnlab.attention_backward"), back.get("attnlab.tiled_attention_backward")
    if tiled_b:
        out.append(("tiled backward <= 3x its forward at S=4096 (FlashAttention-2: about 2.5x)",
                    tiled_b["x_forward"] <= 3, f"{tiled_b['x_forward']:.2f}x"))
    if tiled_b and plain_b:
        out.append(("tiled backward no slower than attention_backward at S=4096",
                    tiled_b["seconds"] <= plain_b["seconds"],
                    f"{tiled_b['seconds']:.3f} s vs {plain_b['seconds']:.3f} s"))
        out.append(("tiled backward peak memory <= 1/16 of attention_backward's",
                    tiled_b["peak_bytes"] * 16 <= plain_b["peak_bytes"],
                    f"1/{plain_b['peak_bytes'] / tiled_b['peak_bytes']:.0f}"))
    if notebooks:
        per = notebooks["per_notebook_seconds"]
        slow = {p: t for p, t in per.items() if t > (20 if "05_" in p else 10)}
        out.append(("every notebook <= 10 s (05: <= 20 s)", not slow, f"slowest {max(per.values()):.1f} s"))
        out.append(("notebook suite under nbval <= 60 s wall", notebooks["nbval_suite_wall_seconds"] <= 60,
                    f"{notebooks['nbval_suite_wall_seconds']:.1f} s"))
    return out


AVX512_KERNELS = ("SkylakeX", "Cooperlake", "SapphireRapids")


def blas_kernel() -> str:
    """The sgemm kernel OpenBLAS chose (or was told to use), as threadpoolctl reports it; "unknown" without it."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    return next((i.get("architecture") or "unknown" for i in threadpool_info() if i["internal_api"] == "openblas"),
                "unknown")


def default_coretypes() -> list[str]:
    """This CPU's own kernel and one other: AVX2's on an AVX-512 machine, AVX's (no FMA) on an AVX2 one."""
    return ["default", "Haswell" if blas_kernel() in AVX512_KERNELS else "Sandybridge"]


def measure(args) -> dict:
    """Everything that depends on the sgemm kernel, in this process: rates, forward and backward passes."""
    floor = Floor(args.repeats)
    print(f"[{blas_kernel()}] float32 matmul rate (all cores): {floor.mm_rate / 1e9:.1f} GFLOP/s;  "
          f"np.exp rate: {floor.exp_rate / 1e9:.2f} G exps/s per core", flush=True)
    rows = bench_attention(args.sizes, args.repeats, floor)
    backward = bench_backward(args.backward_sizes, args.repeats, args.plain_backward_max, floor)
    return {"kernel": blas_kernel(), "matmul_gflops": floor.mm_rate / 1e9, "exp_per_core_per_second": floor.exp_rate,
            "matmul_gflops_range": [min(floor.mm_rates) / 1e9, max(floor.mm_rates) / 1e9],
            "attention": rows, "backward": backward}


def measure_kernels(args) -> list[dict]:
    """``measure`` in a child process per kernel type and size, the kernel types alternating within each size."""
    runs = {ct: [] for ct in args.coretypes}
    sizes = sorted(set(args.sizes) | set(args.backward_sizes))
    for S in sizes:
        for ct in args.coretypes:
            env = dict(os.environ)
            if ct == "default":
                env.pop("OPENBLAS_CORETYPE", None)
            else:
                env["OPENBLAS_CORETYPE"] = ct
            child = [sys.executable, __file__, "--child", "--repeats", str(args.repeats),
                     "--plain-backward-max", str(args.plain_backward_max),
                     "--sizes", *([str(S)] if S in args.sizes else []),
                     "--backward-sizes", *([str(S)] if S in args.backward_sizes else [])]
            proc = subprocess.run(child, env=env, stdout=subprocess.PIPE, text=True, check=True)
            runs[ct].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    out = []
    for ct, parts in runs.items():
        label = "default" if ct == "default" else f"forced {ct}"
        out.append({"coretype": label, "kernel": parts[0]["kernel"],
                    "matmul_gflops": statistics.median(p["matmul_gflops"] for p in parts),
                    "matmul_gflops_range": [min(p["matmul_gflops_range"][0] for p in parts),
                                            max(p["matmul_gflops_range"][1] for p in parts)],
                    "exp_per_core_per_second": statistics.median(p["exp_per_core_per_second"] for p in parts),
                    "attention": [r for p in parts for r in p["attention"]],
                    "backward": [r for p in parts for r in p["backward"]]})
    return out


def x_floor_table(title: str, kernels: list[dict], part: str) -> None:
    """One line per size and contender: time and x floor under each kernel type, side by side."""
    names = [f"{k['kernel']} ({k['coretype'].split()[0]})" for k in kernels]
    header = f"{'S':>5}  {title:<58}" + "".join(f" {n[:26]:>26}" for n in names)
    print(header)
    print(f"{'':>5}  {'':<58}" + "".join(f" {'fastest s':>9} {'x floor':>7} {'(median)':>8}" for _ in names))
    print("-" * len(header))
    first = kernels[0][part]
    for i, r in enumerate(first):
        cells = ""
        for k in kernels:
            o = next((x for x in k[part] if x["S"] == r["S"] and x["implementation"] == r["implementation"]), None)
            cells += f" {o['best_seconds']:9.3f} {o['x_floor']:7.2f} {o['x_floor_median']:8.2f}" if o else f" {'':>26}"
        print(f"{r['S']:>5}  {r['implementation']:<58}{cells}")


def floor_targets(kernels, S: int = 4096) -> list[tuple[str, bool, str]]:
    """The tiled forward and backward within 1.2x of the floor at S = 4096, under every kernel type measured."""
    out = []
    for k in kernels:
        for part, what in (("attention", "tiled forward"), ("backward", "tiled backward")):
            r = next((r for r in k[part] if r["S"] == S and r["implementation"].startswith("attnlab.tiled")), None)
            if r:
                out.append((f"{what} <= 1.2x floor at S={S}, {k['kernel']} ({k['coretype']})", r["x_floor"] <= 1.2,
                            f"{r['x_floor']:.2f}x (median run: {r['x_floor_median']:.2f}x)"))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # nargs="*": a child measuring one size gets an empty list for the part that does not measure it
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backward-sizes", type=int, nargs="*", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--plain-backward-max", type=int, default=4096,
                        help="largest S for attention_backward, which holds H*S*S weights (2 GiB at S=8192)")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--skip-notebooks", action="store_true", help="do not time the notebooks")
    parser.add_argument("--coretypes", nargs="+", default=None,
                        help="OPENBLAS_CORETYPE values to compare ('default': OpenBLAS's own choice); "
                             "default: this CPU's kernel and Haswell (on AVX-512) or Sandybridge (otherwise)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one kernel type, JSON on stdout
    args = parser.parse_args(argv)
    if args.child:
        stdout, sys.stdout = sys.stdout, sys.stderr  # progress to stderr, the result alone to stdout
        result = measure(args)
        print(json.dumps(result), file=stdout)
        return 0
    args.coretypes = args.coretypes or default_coretypes()
    args.out.mkdir(parents=True, exist_ok=True)

    print(f"machine: {platform.processor() or platform.machine()}, {workers()} cores, numpy {np.__version__}, "
          f"OpenBLAS kernels: {', '.join(args.coretypes)}, load average {os.getloadavg()[0]:.1f}")
    kernels = measure_kernels(args)
    rows, backward = kernels[0]["attention"], kernels[0]["backward"]  # the default kernel's, for the tables below
    mm, ex = kernels[0]["matmul_gflops"] * 1e9, kernels[0]["exp_per_core_per_second"]
    notebooks = None if args.skip_notebooks else (print("notebooks:") or bench_notebooks())

    print()
    header = (f"{'S':>5}  {'implementation':<58} {'median s':>8} {'fastest':>8} {'GFLOP/s':>8} {'x floor':>8} "
              f"{'(median)':>8} {'peak MiB':>9} {'max err':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}"
        print(f"{r['S']:>5}  {r['implementation']:<58} {r['seconds']:8.3f} {r['best_seconds']:8.3f} {r['gflops']:8.1f} "
              f"{r['x_floor']:8.2f} {r['x_floor_median']:8.2f} {peak:>9} {r['max_error']:9.1e}")
    print()
    header = (f"{'S':>5}  {'backward':<58} {'median s':>8} {'fastest':>8} {'GFLOP/s':>8} {'x floor':>8} {'(median)':>8} "
              f"{'x fwd':>6} {'peak MiB':>9} {'max err':>9} {'rel err':>9}")
    print(header)
    print("-" * len(header))
    for r in backward:
        x_fwd = "" if r["x_forward"] is None else f"{r['x_forward']:.2f}"
        print(f"{r['S']:>5}  {r['implementation']:<58} {r['seconds']:8.3f} {r['best_seconds']:8.3f} {r['gflops']:8.1f} "
              f"{r['x_floor']:8.2f} {r['x_floor_median']:8.2f} {x_fwd:>6} {r['peak_bytes'] / 2**20:9.1f} "
              f"{r['max_error']:9.1e} {r['max_relative_error']:9.1e}")
    for k in kernels:
        lo, hi = k["matmul_gflops_range"]
        print(f"\n{k['kernel']} ({k['coretype']}): float32 matmul {k['matmul_gflops']:.1f} GFLOP/s (all cores; "
              f"{lo:.0f}-{hi:.0f} over its readings), np.exp {k['exp_per_core_per_second'] / 1e9:.2f} G/s per core")
    print("\nx floor under each sgemm kernel, side by side (each kernel's floor from its own matmul rate):\n")
    x_floor_table("forward", kernels, "attention")
    print()
    x_floor_table("backward", kernels, "backward")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if notebooks:
        print(f"\nnotebooks: {notebooks['total_seconds']:.1f} s in all, one at a time; "
              f"the nbval suite: {notebooks['nbval_suite_wall_seconds']:.1f} s wall "
              f"({'passed' if notebooks['nbval_suite_passed'] else 'FAILED'})")
    print("\ntargets:")
    results = targets(rows, notebooks, backward) + floor_targets(kernels)
    for name, ok, value in results:
        print(f"  [{'met' if ok else 'MISSED'}] {name}: {value}")

    report = {"machine": {"cores": workers(), "numpy": np.__version__, "python": platform.python_version(),
                          "matmul_gflops": mm / 1e9, "exp_per_core_per_second": ex},
              "kernels": kernels,
              "H": H, "D": D, "dtype": "float32", "blocks": BLOCKS, "backward_blocks": BACKWARD_BLOCKS,
              "attention": rows, "backward": backward, "notebooks": notebooks,
              "targets": [{"target": n, "met": ok, "value": v} for n, ok, v in results]}
    (args.out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(rows, backward, args.out / "bench.png")
    print(f"\nwrote {args.out / 'bench.json'} and {args.out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
