"""Channel adapters: one self-contained package per platform.

An adapter talks to the engine only through the inbound sink (ingest) and the outbound
protocol (:class:`postroom.engine.delivery.Sink`).
"""
