"""Benchmarks of the paths users run (investigation, sweep, eval throughput, loop, service, db
copy), each writing its own figures.

May import: anything of Pivot's; nothing imports `bench`.
"""
