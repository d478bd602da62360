"""A stand-in for the ``sglang`` package: only ``python -m sglang.launch_server``, so that a
test's server has SGLang's command line (``launch_server.py``)."""
