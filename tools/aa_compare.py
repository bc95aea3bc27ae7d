#!/usr/bin/env python3
"""Compares the A/A noise of two builds from tools/aa_noise.sh runs.

    tools/aa_compare.py BEFORE_WORK[,BEFORE_WORK...] AFTER_WORK[,AFTER_WORK...]

Each WORK is a directory aa_noise.sh printed ("work in ..."); its
ratios.tsv holds one candidate/baseline ratio per pair. Per metric, over
all pairs of each side: the standard deviation of the log ratios (percent),
the after/before ratio of the two, a 95% bootstrap interval of that ratio
(resampling the pairs of each side, 4000 times), and a one-sided
permutation p-value for "after is noisier" on the absolute deviations from
each side's median (Brown-Forsythe, robust to a few slow-host outliers).
An after/before interval whose upper end is above 1 cannot rule out more
noise; a small p-value says there is more.
"""
import math
import random
import statistics
import sys


def load(dirs):
    by_metric = {}
    for d in dirs.split(","):
        with open(f"{d}/ratios.tsv") as f:
            for line in f:
                metric, _run, _pair, ratio = line.rstrip("\n").split("\t")
                by_metric.setdefault(metric, []).append(math.log(float(ratio)))
    return by_metric


def sd(xs):
    return statistics.stdev(xs) * 100


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip())
        return 2
    rng = random.Random(1)
    before, after = load(sys.argv[1]), load(sys.argv[2])
    print(f"{'metric':32} {'n before':>8} {'sd %':>6} {'n after':>8} {'sd %':>6} "
          f"{'after/before':>12} {'95% interval':>14} {'p noisier':>9}")
    for metric in sorted(set(before) & set(after)):
        a, b = before[metric], after[metric]
        if len(a) < 3 or len(b) < 3:
            continue
        ratio = sd(b) / sd(a)
        boot = sorted(sd(rng.choices(b, k=len(b))) / sd(rng.choices(a, k=len(a)))
                      for _ in range(4000))
        low, high = boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]
        # Permutation of the deviations from each side's own median, so that
        # a shift in the median ratio does not count as spread.
        ma, mb = statistics.median(a), statistics.median(b)
        dev_a, dev_b = [abs(x - ma) for x in a], [abs(x - mb) for x in b]
        seen = statistics.fmean(dev_b) - statistics.fmean(dev_a)
        pooled, hits = dev_a + dev_b, 0
        for _ in range(4000):
            rng.shuffle(pooled)
            if statistics.fmean(pooled[len(a):]) - statistics.fmean(pooled[:len(a)]) >= seen:
                hits += 1
        print(f"{metric:32} {len(a):8d} {sd(a):6.2f} {len(b):8d} {sd(b):6.2f} "
              f"{ratio:12.2f} {f'[{low:.2f}, {high:.2f}]':>14} {hits / 4000:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
