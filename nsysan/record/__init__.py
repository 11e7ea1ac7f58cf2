"""Recording and export: which nsys to run (``nsys``), a program run as a process group stopped as a
whole (``process``), ``nsysan profile`` (``profile``), and a ``.nsys-rep`` report exported into
nsysan's cache (``export``). Standard library only: none of it waits for pandas."""
