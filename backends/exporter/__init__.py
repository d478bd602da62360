"""The Prometheus exporter: ``metrics.GpumonCollector`` and ``metrics.MetricsServer``."""
