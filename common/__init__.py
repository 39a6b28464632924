"""What every entry point (export, serving, the gateway, the load tester, the benchmarks) shares and no one of them
owns: ``options.py``, each entry point's options derived from its one frozen, typed dataclass."""
