"""Alerts delivered to people and their tools: incidents, notifiers, the outbox.

``NotifyHub`` (hub) turns the monitors' alerts into incident events (incidents), keeps
them in the persistent outbox (outbox) and delivers them through the configured
``[notify.NAME]`` notifiers (notifiers). ``gpumon watch`` and the dashboard share it.
"""
