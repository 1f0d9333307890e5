"""The resident daemon: systemd notify/watchdog, single-instance lock, supervision of the turn loop."""
