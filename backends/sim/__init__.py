"""The built-in simulated GPU machine: a stand-in ``nvidia-smi`` and training job.

Only the GPUs are simulated. ``smi`` is an executable that prints nvidia-smi's exact text
formats from the deterministic model in ``scenario``, so the real agent and parsers read it
exactly as they read a real host. ``job`` writes a training log that ends in a CUDA OOM,
and ``wrapper`` writes the ``/bin/sh`` scripts that put both on a PATH.
"""
