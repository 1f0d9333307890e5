"""The board as an ESPHome voice-assistant device (``satellite.protocol: esphome``): the native API Home
Assistant's ESPHome integration speaks, as an adapter over the one satellite core (rkvoice.satellite.core).

framing (plain-text and Noise frames) -> server (the API connection: hello, device info, entities, keys)
-> voice (the voice assistant: the core's port, Home Assistant's events, replies and announcements by URL);
identity (MAC, name, stored key and choices), entities (mute switch, wake words), reply_audio (fetch + decode).
"""
