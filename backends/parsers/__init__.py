"""Pure parsers from tool output (nvidia-smi, Prometheus text, logs) to typed records."""
