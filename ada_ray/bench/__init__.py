"""Benchmarks (`ada-ray bench <name>`): every figure is measured by this code in one run on one
machine, and written as JSON (+ PNG plots) into a results folder. A `smoke=true` mode runs each in
seconds for CI, so the benches cannot rot."""
