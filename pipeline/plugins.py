"""Every plug-in the project ships, by seam: the one place a plug-in is registered.

A name maps to an import string (``module:attribute``), the way stage tasks are addressed by
name: ``pipeline`` knows what exists without importing ``workers``, task payloads are checked
against these names at submit time (``schemas/task.py``), and each seam's registry loads the
implementation on first use in the process that runs it (``Registry.from_catalog``).
``PLANNED`` names are accepted at submit and end the session with a clear "not available in
this build" until they are implemented.

Adding a runtime backend, harness, evaluator or builder: write its module, add one line here.
(Provider APIs and engine dialects live inside the proxy and register there.)
"""

from __future__ import annotations

RUNTIMES = {
    "local": "workers.runtimes.local:LocalRuntime",
    "bwrap": "workers.runtimes.bwrap:BwrapRuntime",
    "docker": "workers.runtimes.docker:DockerRuntime",
    "apptainer": "workers.runtimes.apptainer:ApptainerRuntime",
}
# The RuntimeSpec fields each backend honours beyond env and prepare; a task that sets another
# (to anything but its default) is refused at submit, naming the field -- never ignored.
RUNTIME_FIELDS = {
    "local": {"workdir"},
    "bwrap": {"workdir", "network", "allow_internet"},
    "docker": {"image", "workdir", "network", "allow_internet", "cpus", "memory_mb", "storage_mb", "gpus"},
    "apptainer": {"image", "workdir", "network", "allow_internet", "cpus", "memory_mb", "gpus"},
}
# Backends that run a task image (and need one).
IMAGE_BACKENDS = ("docker", "apptainer")
HARNESSES = {
    "shell": "workers.harnesses.shell:ShellHarness",
    "codex": "workers.harnesses.codex:CodexHarness",
    "claude_code": "workers.harnesses.claude_code:ClaudeCodeHarness",
    "gemini_cli": "workers.harnesses.gemini_cli:GeminiCliHarness",
    "qwen_code": "workers.harnesses.qwen_code:QwenCodeHarness",
    "opencode": "workers.harnesses.opencode:OpencodeHarness",
    "pi": "workers.harnesses.pi:PiHarness",
}
# The CLI presets: their agent.settings are HarnessOptions (pipeline/schemas/harness.py).
CLI_PRESETS = ("codex", "claude_code", "gemini_cli", "qwen_code", "opencode", "pi")
EVALUATORS = {
    "session_completed": "workers.evaluators.session_completed:SessionCompletedEvaluator",
    "command": "workers.evaluators.command:CommandEvaluator",
    "test_on_output": "workers.evaluators.test_on_output:TestOnOutputEvaluator",
    "swebench_harness": "workers.evaluators.swebench_harness:SwebenchHarnessEvaluator",
}
BUILDERS = {
    "per_request": "pipeline.builders.per_request:PerRequestBuilder",
    "prefix_merging": "pipeline.builders.prefix_merging:PrefixMergingBuilder",
}

PLANNED = {
    "runtime backend": (),
    "harness": (),
    "evaluator strategy": (),
}
