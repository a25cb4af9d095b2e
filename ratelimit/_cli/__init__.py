"""What the ``ratelimit`` command does beyond parsing its arguments (``cli.py``).

Rates as written on the command line, sizing and its report, the benchmark engine,
its worker processes, statistics, report and plot, and the redaction of secrets in
what it prints. The library below never imports from here.
"""
