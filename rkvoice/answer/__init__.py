"""Answering: local tools first (tools/), else a streamed local LLM (llm/), spoken as it arrives
(``assistant.Assistant`` routes and streams the text, ``respond.Answerer`` speaks it)."""
