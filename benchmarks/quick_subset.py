"""Are fewer of `best`'s candidates enough to match saga's best heuristic? (No: they overfit.)

Issue #19 asks for makespans at most saga's best heuristic's (median over seeds) on every class, and
for 100 times saga's HEFT's speed. `best` runs 14 heuristics (up to 30 on unequal processors) and
polishes; fewer would be faster. This script runs every candidate alone on each instance of the
52 classes of `benchmarks/results/portfolio_vs_saga-s61-2core-vm.txt` (the 36 issue classes: 100,
1,000 and 5,000 tasks on 4, 8 and 32 processors; the 16 held-out ones: 300 and 2,000 tasks on 2
and 16), seeds 0-2, and reads saga's best heuristic's median from that file. It prints how many
classes each candidate matches alone, then the smallest subsets that match all 36 issue classes,
each with how many of the held-out ones it matches too. A subset matches a class where the median
over seeds of its least makespan is at most saga's best.

``--new-seeds`` instead checks a subset (``--subset``, default `SUBSET`), all of `best`'s candidates
and `best` itself (polished) on seeds 3-5 (``--seeds``) of the classes up to 1,000 tasks, against
saga's HEFT, CPoP and FCP run here on the same instances (needs saga: ``pip install '.[saga]'``,
Python 3.12+; about 10 minutes).

Session 62 (`benchmarks/results/quick_subset-s62-2core-vm.txt`): no four candidates match all 36
issue classes; two sets of five do, `SUBSET` also all 16 held-out classes. On seeds 3-5 of 32
classes it matches 28, where all of `best`'s candidates match 31; so it was not made a solver.

Usage: python benchmarks/quick_subset.py [--new-seeds] [--subset NAME,NAME,...] [--kinds KIND,...] [--seeds 3,4,5]
       [--max-size 6]
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
from pathlib import Path

from solvers_bench import instance, run_saga

from layersched.cli.options import positive_int
from solvers.heuristics import best, candidates

TABLE = Path(__file__).resolve().parent / "results" / "portfolio_vs_saga-s61-2core-vm.txt"
ISSUE_SIZES = (100, 1000, 5000)
SUBSET = ("heft", "list", "heft-t0.25", "fcp-ends", "heft-pairs-ties2")
"""The subset of five that session 62 found to match all 52 classes on seeds 0-2 (``heft-pairs-ties2``
runs only on unequal processors or links, as in `best`)."""


def stored_saga_best() -> dict[tuple[str, int, int], int]:
    """(kind, tasks, processors) -> saga's best heuristic's median makespan, seeds 0-2 (`TABLE`)."""
    found = {}
    for line in TABLE.read_text().splitlines():
        m = re.match(r"(\S+)\s+(\d+)\s+(\d+)\s+saga best\s+(\d+)", line)
        if m:
            found[(m[1], int(m[2]), int(m[3]))] = int(m[4])
    if len(found) != 52:
        raise SystemExit(f"{TABLE}: expected 52 classes, read {len(found)}")
    return found


def makespans(kind: str, n: int, P: int, seeds) -> dict[str, list[int]]:
    """Each candidate of `best` alone: its makespan per seed (a candidate that `best` does not run on
    this problem, e.g. HEFT's tie orders on equal processors, is absent)."""
    out: dict[str, list[int]] = {}
    for seed in seeds:
        problem, _ = instance(kind.removesuffix("-het"), n, P, seed, hetero=kind.endswith("-het"))
        for name, run in candidates(problem):
            out.setdefault(name, []).append(run(problem).objective)
    return out


def matches(subset, runs: dict[str, list[int]], saga: float) -> bool:
    """Whether the median over seeds of ``subset``'s least makespan is at most ``saga``."""
    there = [name for name in subset if name in runs]
    if not there:
        return False
    seeds = len(next(iter(runs.values())))
    return statistics.median(min(runs[name][s] for name in there) for s in range(seeds)) <= saga


def subsets(max_size: int) -> None:
    saga = stored_saga_best()
    runs = {}
    for key in saga:
        runs[key] = makespans(*key, range(3))
        print(f"# ran {key[0]} {key[1]}/{key[2]}", flush=True)
    names = sorted({name for r in runs.values() for name in r})
    issue = [k for k in saga if k[1] in ISSUE_SIZES]
    held = [k for k in saga if k[1] not in ISSUE_SIZES]
    print(f"\n{len(issue)} issue classes, {len(held)} held-out; classes each candidate matches alone:")
    for name in names:
        alone = [k for k in saga if matches([name], runs[k], saga[k])]
        print(f"  {name:18s} {sum(k in issue for k in alone):3d} issue  {sum(k in held for k in alone):3d} held-out")
    for size in range(1, max_size + 1):
        good = [s for s in itertools.combinations(names, size) if all(matches(s, runs[k], saga[k]) for k in issue)]
        if not good:
            most = max(sum(matches(s, runs[k], saga[k]) for k in issue) for s in itertools.combinations(names, size))
            print(f"subsets of {size}: none matches all {len(issue)} issue classes (at most {most})")
            continue
        print(f"subsets of {size} that match all {len(issue)} issue classes:")
        for s in good:
            missed = [f"{k[0]} {k[1]}/{k[2]}" for k in held if not matches(s, runs[k], saga[k])]
            print(f"  {', '.join(s)}: held-out {len(held) - len(missed)} of {len(held)}", *missed)
        return
    print(f"no subset of at most {max_size} candidates matches every issue class")


KINDS = ("layered", "erdos", "layered-het", "erdos-het")


NEW_SEEDS = (3, 4, 5)
NEW_SIZES = ((100, (4, 8, 32)), (300, (2, 16)), (1000, (4, 8, 32)))
"""``--new-seeds``' classes: (tasks, processor counts) for each kind."""


def new_seeds(subset, kinds=KINDS, seeds=NEW_SEEDS) -> None:
    ok, classes = [0, 0, 0], 0
    named = ",".join(map(str, seeds))
    print(f"{'class':22s} {'saga best':>9s} {'subset':>7s} {'all':>7s} {'best':>7s}  (medians of seeds {named})")
    for kind, (n, counts) in itertools.product(kinds, NEW_SIZES):
        for P in counts:
            runs, by_algorithm = makespans(kind, n, P, seeds), {}
            polished = []
            for seed in seeds:
                problem, arrays = instance(kind.removesuffix("-het"), n, P, seed, hetero=kind.endswith("-het"))
                polished.append(best(problem).objective)
                for algorithm in ("HEFT", "CPoP", "FCP"):
                    by_algorithm.setdefault(algorithm, []).append(run_saga(problem, arrays, algorithm, 600)[1])
            # saga's best heuristic in a class: the least of the three medians, as in the tables
            target = min(statistics.median(v) for v in by_algorithm.values())
            least = [statistics.median(min(runs[k][s] for k in names if k in runs) for s in range(len(seeds)))
                     for names in (subset, list(runs))]  # fmt: skip
            least.append(statistics.median(polished))
            classes += 1
            ok = [k + (x <= target) for k, x in zip(ok, least, strict=True)]
            labels = ("subset", "all", "best")
            above = " ".join(f"{name} above" for name, x in zip(labels, least, strict=True) if x > target)
            figures = " ".join(f"{x:7g}" for x in least)
            print(f"{kind + f' {n}/{P}':22s} {target:9g} {figures}  {above}", flush=True)
    print(f"at most saga's best heuristic on {classes} classes: the subset ({', '.join(subset)}) on {ok[0]}, "
          f"all of best's candidates on {ok[1]}, best on {ok[2]}")  # fmt: skip


def seed_list(text: str) -> tuple[int, ...]:
    """``"6,7,8"`` -> ``(6, 7, 8)``: distinct seeds, each a whole number of at least 0."""
    parts = text.split(",")
    if not all(part.strip().isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"expected seeds like 6,7,8 (whole numbers, at least 0), got {text!r}")
    seeds = tuple(int(part) for part in parts)
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"a seed is given twice in {text!r}")
    return seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--new-seeds", action="store_true", help="check a subset on new seeds (--seeds) against saga run here"
    )
    parser.add_argument(
        "--subset", default=",".join(SUBSET), help=f"--new-seeds: candidates to check (default {','.join(SUBSET)})"
    )
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"--new-seeds: instance kinds (default {','.join(KINDS)})"
    )
    parser.add_argument(
        "--seeds",
        type=seed_list,
        default=NEW_SEEDS,
        help="--new-seeds: instance seeds, comma-separated (default 3,4,5; the tables use 0-2)",
    )
    parser.add_argument("--max-size", type=positive_int, default=6, help="largest subset tried (default 6)")
    args = parser.parse_args()
    if args.new_seeds:
        names = args.subset.split(",")
        problem, _ = instance("layered", 10, 4, 0, hetero=True)  # unequal processors: every candidate runs
        valid = [name for name, _ in candidates(problem)]
        unknown = [name for name in names if name not in valid]
        if unknown:
            parser.error(f"--subset: unknown candidate {unknown[0]!r}; valid: {', '.join(valid)}")
        kinds = args.kinds.split(",")
        bad = [kind for kind in kinds if kind not in KINDS]
        if bad:
            parser.error(f"--kinds: unknown kind {bad[0]!r}; valid: {', '.join(KINDS)}")
        new_seeds(names, kinds, args.seeds)
    else:
        subsets(args.max_size)


if __name__ == "__main__":
    main()
