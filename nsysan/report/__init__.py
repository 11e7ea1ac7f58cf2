"""View model and renderers (JSON, CSV, HTML)."""
