"""rkvoice as a Wyoming server: wake, ASR, TTS and answers for Home Assistant. ``server.serve_wyoming``
is the entry; ``engines.Engines`` shares loaded engines with the local loop."""
