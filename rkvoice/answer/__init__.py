"""Answering: local tools first (tools/), else a streamed local LLM (llm/), spoken as it arrives.

- ``assistant.Assistant``: routes a transcript, owns state, reminders and the conversation;
  ``reply(text)`` -> route + a stream of text deltas.
- ``respond.Answerer``: the assistant plus the speaker (StreamChunker in between, timeline marks).
- ``rkvoice.cli.ask.run_text``: ``assistant.py --text``.
"""
