"""The board as a Home Assistant Assist satellite (the Wyoming *satellite* role).

rkvoice listens on its own TCP port (``satellite.uri``) and Home Assistant connects to it. The board
wakes on its own wake engine, hands the request's audio to HA's pipeline (``run-pipeline`` asr -> tts)
and plays what HA sends back (answers, timer alarms, announcements) on its own player.

- ``core``: the satellite below any protocol: one state machine (``SatelliteState``: idle, streaming,
  awaiting the reply, responding, announcing, ringing, muted) on one event loop; the runs asked and
  which one the peer's events belong to.
- ``link``: the Wyoming adapter (asyncio): one HA connection at a time, events in and out of the core.
- ``info``: what it says of itself (``info``: the satellite alone; ``--check``'s line).
- ``mic``: the microphone thread (it only posts frames to the core) and the hearing the core runs on
  its hear thread: wake, the request's head, the board's VAD.
- ``playback``: HA's audio and the board's own words on the player, one after another; ``played``.
- ``timers``: the timer table HA keeps us informed of.
- ``sounds``: the device's own sounds (wake, thinking, timer, error; ``satellite.sounds``).
- ``run``: the ``--satellite`` CLI mode and the daemon's satellite listener.
"""
