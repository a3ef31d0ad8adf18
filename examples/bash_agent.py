"""A minimal coding agent: an OpenAI-SDK tool-calling loop with one `bash` tool.

It knows nothing about polar-rollout: like any harness, it reads OPENAI_BASE_URL and
OPENAI_API_KEY from the environment (the runtime points them at the proxy, with the session's key
as the key). POLAR_AGENT_STREAM=1 makes it stream, accumulated by the SDK's own stream helper.

    python bash_agent.py "Create hello.txt containing 'hello world'"
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from openai import OpenAI

TOOLS = [{
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the working directory; returns stdout and stderr.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]},
    },
}]
SYSTEM = "You are a coding agent. Use the bash tool to act in the working directory; answer when done."


def ask(client: OpenAI, model: str, messages: list) -> object:
    if os.environ.get("POLAR_AGENT_STREAM") == "1":
        with client.chat.completions.stream(model=model, messages=messages, tools=TOOLS) as stream:
            return stream.get_final_completion().choices[0].message
    return client.chat.completions.create(model=model, messages=messages, tools=TOOLS).choices[0].message


def main() -> int:
    instruction = " ".join(sys.argv[1:]) or os.environ["POLAR_INSTRUCTION"]
    # The SDK's default 2 retries give up within ~1.5 s; a restarted proxy (its supervisor brings
    # it back in a few seconds) or a proxy waiting out a Redis restart needs longer. The CLIs retry
    # for longer too.
    client = OpenAI(max_retries=8)
    model = os.environ.get("POLAR_MODEL", "default")
    messages: list = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": instruction}]
    for _ in range(int(os.environ.get("MAX_TURNS", "20"))):
        msg = ask(client, model, messages)
        turn: dict = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            turn["tool_calls"] = [{"id": c.id, "type": "function",
                                   "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                  for c in msg.tool_calls]
        messages.append(turn)
        if not msg.tool_calls:
            print(msg.content)
            return 0
        for call in msg.tool_calls:
            command = json.loads(call.function.arguments or "{}").get("command", "")
            proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
            output = (proc.stdout + proc.stderr)[-8000:] or f"(exit status {proc.returncode})"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    print("gave up: too many turns", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
