"""``engine run`` wall time from a shell, against ``rg`` on the same question and workspace.

    python benchmarks/cli_wall.py --workspace WS [--runs 20] [--cold 5] [--json out.json]
    python benchmarks/cli_wall.py --imports httpx engine.runtime …   # best-of-15 import costs

Rows (each a command as a shell runs it, through the ``engine`` console script of this
interpreter's environment):

* ``rg`` — plain ripgrep for the question's identifier (the ``rg`` shipped with the engine);
* ``engine run`` via the daemon, ``--no-cache`` (every call runs the pipeline) and with the cache
  (the same question again: the common agent pattern of re-asking);
* ``engine run --no-daemon`` — the in-process path every call paid before the daemon;
* ``python -c pass`` — the interpreter's own start, the floor of any Python CLI.

"first call" for the daemon rows = the daemon is stopped before each of ``--cold`` calls (the
median is reported: a cold start, page cache warm); for the other rows it is the first of the
runs. "p50 / p95" are over the next ``--runs`` calls. Timed with ``hyperfine`` (``-N``, no shell)
when it is installed, else with a subprocess loop. The load average is reported with the numbers:
on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
QUESTION = "where is ValidationError defined"
PATTERN = "ValidationError"


def _times(cmd: list[str], runs: int, prepare: list[str] | None = None) -> list[float]:
    """Wall seconds of ``runs`` runs of ``cmd`` (``prepare`` runs, untimed, before each)."""
    if shutil.which("hyperfine"):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            args = ["hyperfine", "-N", "--style", "none", "--runs", str(runs), "--export-json", out.name]
            if prepare:
                args += ["--prepare", subprocess.list2cmdline(prepare)]
            subprocess.run([*args, subprocess.list2cmdline(cmd)], check=True, capture_output=True)
            return [float(t) for t in json.loads(Path(out.name).read_text())["results"][0]["times"]]
    times = []
    for _ in range(runs):
        if prepare:
            subprocess.run(prepare, check=True, capture_output=True)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _row(name: str, cmd: list[str], runs: int, cold: int, prepare: list[str] | None = None) -> dict[str, object]:
    if prepare:  # a cold start each time: median of `cold` of them
        first = statistics.median(_times(cmd, cold, prepare))
        warm = _times(cmd, runs)
    else:
        both = _times(cmd, runs + 1)
        first, warm = both[0], both[1:]
    return {
        "command": name,
        "argv": cmd,
        "first_ms": round(first * 1000),
        "p50_ms": round(statistics.median(warm) * 1000),
        "p95_ms": round(_pct(warm, 0.95) * 1000),
        "min_ms": round(min(warm) * 1000),  # the run least disturbed by the machine's other load
        "runs": runs,
    }


def import_ms(argv: list[str], runs: int = 15) -> dict[str, float]:
    """Best-of-``runs`` cumulative import time (ms) of each top-level import ``python -X importtime
    ARGV`` makes (the best run is the one least disturbed by the machine's other load)."""
    best: dict[str, float] = {}
    for _ in range(runs):
        res = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True)
        for line in res.stderr.splitlines():
            parts = line.split("|")
            top_level = len(parts) == 3 and parts[2].startswith(" ") and parts[2][1] != " "
            if line.startswith("import time:") and top_level and parts[1].strip().isdigit():
                name, ms = parts[2].strip(), int(parts[1]) / 1000
                best[name] = min(best.get(name, ms), ms)
    return best


def _client_imports(engine: list[str]) -> float:
    """What the client path imports beyond the interpreter's start: its top-level ``engine*`` imports."""
    best = import_ms(["-m", "engine.launch", *engine[1:]])
    return sum(ms for name, ms in best.items() if name.startswith("engine"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, help="an indexed workspace (required unless --imports)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--pattern", default=PATTERN, help="what rg searches for (the question's identifier)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--imports", nargs="+", metavar="MODULE", help="only print best-of-15 import times of these modules"
    )
    args = parser.parse_args()
    if args.imports:  # everything `import MODULE` adds to the interpreter's own start
        start = import_ms(["-c", "pass"])
        for module in args.imports:
            best = import_ms(["-c", f"import {module}"])
            print(f"{module}: {sum(ms for name, ms in best.items() if name not in start):.1f} ms")
        return
    if args.workspace is None:
        parser.error("--workspace is required")
    ws = str(args.workspace.resolve())
    engine = [str(BIN / "engine"), "run", "router", "-w", ws, "-q", args.question, "-f", "toon"]
    stop = [str(BIN / "engine"), "daemon", "stop", "-w", ws]
    rg = shutil.which("rg", path=str(BIN)) or "rg"
    load_before = os.getloadavg()
    rows = [
        _row("rg -n PATTERN WS", [rg, "-n", args.pattern, ws], args.runs, args.cold),
        _row("engine run (daemon, --no-cache)", [*engine, "--no-cache"], args.runs, args.cold, prepare=stop),
        _row("engine run (daemon, cache on)", engine, args.runs, args.cold, prepare=stop),
        _row("engine run --no-daemon --no-cache", [*engine, "--no-daemon", "--no-cache"], args.runs, args.cold),
        _row("python -c pass", [sys.executable, "-c", "pass"], args.runs, args.cold),
    ]
    client_ms = _client_imports(engine)
    subprocess.run(stop, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "head": head,
        "workspace": ws,
        "question": args.question,
        "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "timer": "hyperfine -N" if shutil.which("hyperfine") else "subprocess loop",
        "client_import_ms": round(client_ms, 1),
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    load = f"load {result['load_before']} → {result['load_after']}"
    print(f"{result['date']} HEAD {head}, {result['cores']} cores, {load}, timer: {result['timer']}")
    print(f"client-path imports: {result['client_import_ms']} ms (best of 15, -X importtime)\n")
    print(f"| command | first call ms | p50 ms (next {args.runs}) | p95 ms | min ms |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| `{r['command']}` | {r['first_ms']} | {r['p50_ms']} | {r['p95_ms']} | {r['min_ms']} |")


if __name__ == "__main__":
    main()
