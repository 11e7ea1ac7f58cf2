"""View model and renderers (JSON, CSV, HTML, notebook, Perfetto, terminal).

Imports run one way (``tests/test_imports.py``), from the shared pieces up to the pages:

- shared: ``records`` (frames as JSON-ready values), ``tables`` (the view model's ``Table`` and the
  iteration breakdown's bars), ``encoding`` (varints) and ``deflate`` (zlib + base64), ``ranks_view``
  (the ranks panel), ``samples_view`` (the samples section);
- ``metrics_view`` (GPU metrics: JSON block, section, timeline lanes) on the shared pieces;
  ``timeline`` (the canvas lanes) on those; ``jsonout`` (the JSON document, CSV) on ``records`` and
  ``metrics_view``; ``perfetto`` (trace-event JSON) on the analysis alone;
- ``view`` (the report's view model) on all of the above; ``html`` renders it; ``notebook`` and
  ``cross`` (``summary.html``) render through ``html``'s environment.

No analysis happens here: what a stream does (``analyses/streams.py``) and who the straggler is
(``analyses/ranks.py``) are analyses the renderers read."""
