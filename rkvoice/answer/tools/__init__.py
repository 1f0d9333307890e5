"""Local tools answering exact facts in speakable Chinese; ``router.route`` picks one or returns None."""
