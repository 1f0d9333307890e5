"""Answering: local tools first (tools/), else a streamed local LLM (llm/), spoken as it arrives.

- ``assistant.Assistant``: routes a transcript, owns state, reminders and the conversation;
  ``reply(text)`` -> route + a stream of text deltas.
- ``turn.Answerer``: the assistant plus the speaker (StreamChunker in between, timeline marks).
- ``cli_text.run_text``: ``assistant.py --text``.
"""
