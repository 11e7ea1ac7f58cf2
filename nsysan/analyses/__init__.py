"""Pure analyses: ``Trace`` -> DataFrames and small dataclasses. No I/O, no formatting."""
