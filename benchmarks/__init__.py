"""Benchmarks: each is run from the repository root as a module (`python -m benchmarks.bench_faults`)
and ends with one JSON line of figures. Run that way, the ones that drive the test suite's harness
(fault injection, planted copies) import it as the `tests` package, with no path edits."""
