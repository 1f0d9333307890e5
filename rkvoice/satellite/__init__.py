"""The board as a Home Assistant Assist satellite (the Wyoming *satellite* role).

rkvoice listens on its own TCP port (``satellite.uri``) and Home Assistant connects to it. The board
wakes on its own wake engine, hands the request's audio to HA's pipeline (``run-pipeline`` asr -> tts)
and plays what HA sends back (answers, timer alarms, announcements) on its own player.

- ``link``: the protocol side (asyncio): one HA connection at a time, events in and out.
- ``info``: what it says of itself (``info``: the satellite alone; ``--check``'s line).
- ``mic``: the microphone side (a thread): wake, then stream the request until HA has heard it (or
  the board's VAD says it ended).
- ``playback``: HA's audio and the board's own words on the player, one after another; ``played``.
- ``timers``: the timer table HA keeps us informed of.
- ``run``: the ``--satellite`` CLI mode and the daemon's satellite listener.
"""
