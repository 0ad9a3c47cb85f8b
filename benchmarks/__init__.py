"""Benchmarks: throughput, time to solve, scaling, communication, projections."""
