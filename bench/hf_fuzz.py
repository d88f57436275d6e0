"""Issue 24 floor: the HF config.json fuzzer at full size, with its tally.

    python bench/hf_fuzz.py [--examples 10000]

Runs tests/test_robustness_hf_fuzz.py's property (every family's config.json with one to four shape keys
dropped, nulled, zeroed, negative, huge, of the wrong type or duplicated across families: each either
refused in one line naming a changed key, or priced with the parameter count of the transformers model,
against the test's own hand count) on that many examples and prints how many were refused and priced,
by family. Exit 1 on the first failing example (hypothesis prints it). Parse and count only: no search.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    args = ap.parse_args()
    os.environ["HF_FUZZ_EXAMPLES"] = str(args.examples)
    spec = importlib.util.spec_from_file_location("hf_fuzz", ROOT / "tests" / "test_robustness_hf_fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "tests"))
    spec.loader.exec_module(mod)
    by_family: collections.Counter = collections.Counter()
    real = mod._outcome

    def counted(family, cfg, changes):
        out = real(family, cfg, changes)
        by_family[(family, out)] += 1
        return out

    mod._outcome = counted
    t0 = time.perf_counter()
    try:
        mod.test_every_changed_config_is_refused_naming_a_key_or_priced_as_transformers_builds()
    except Exception as exc:  # the failing example was printed by hypothesis
        print(f"FAILED after {sum(mod.TALLY.values()):,} examples: {type(exc).__name__}: {str(exc)[:500]}")
        return 1
    dt = time.perf_counter() - t0
    total = sum(mod.TALLY.values())
    print(f"{total:,} examples in {dt:.1f} s: {mod.TALLY['refused']:,} refused in one line naming a changed key, "
          f"{mod.TALLY['priced']:,} priced at the transformers count; 0 tracebacks, 0 mismatches")
    for family in sorted({f for f, _ in by_family}):
        print(f"  {family:<12s} refused {by_family[(family, 'refused')]:>5,}  priced {by_family[(family, 'priced')]:>5,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
