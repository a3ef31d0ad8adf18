"""A small vLLM server extension: the token-in chat route ``POST /v1/chat/completions/tokens``
(see README.md). ``token_in`` is pure (no vLLM import); ``serving`` and ``serve`` need vLLM."""
