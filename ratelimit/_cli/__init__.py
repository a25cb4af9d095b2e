"""What the ``ratelimit`` command does beyond parsing its arguments (``cli.py``).

Sizing and its report, the benchmark engine (workers, statistics, report, plot), and
the operator commands' store and reports. The library below never imports from here.
"""
