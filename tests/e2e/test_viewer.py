"""The trajectory viewer in headless Chromium on the full stack: a demo session run with the
prefix_merging builder under a policy whose first turn and one tool output carry XSS payloads and
whose second turn has reasoning the agent does not replay (so its third turn drifts). The browser logs in,
walks tasks -> session -> trace, and the page is checked in the DOM (text, counts, nothing from
the trajectory executed) and in a screenshot (the colours of trainable and masked tokens, the
heat scale, tool-call and interstitial marks, the drift badge, the timeline's bars and calls)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.status import SessionStatus
from tests.e2e.cdp import Browser

CHROMIUM = shutil.which("chromium")
COLOURS = {  # pipeline/api/viewer/static/viewer.css
    "trainable": "#1d4ed8", "masked": "#d4d4d8", "tool": "#7c3aed", "interstitial": "#0f766e", "drift": "#dc2626",
    "h0": "#ffffd4", "h1": "#fee391", "h2": "#fec44f", "h3": "#fe9929", "h4": "#d95f0e", "h5": "#993404",
    "QUEUE": "#cbd5e1", "INIT": "#60a5fa", "READY": "#a78bfa", "RUN": "#22c55e", "POSTRUN": "#f472b6",
    "EVALUATE": "#f59e0b", "CALLBACK": "#64748b", "call": "#111827",
}
HEAT = ["h0", "h1", "h2", "h3", "h4", "h5"]


@pytest.fixture(scope="session")  # session-scoped and asked for first: checked before a stack starts
def browser():
    if CHROMIUM is None:
        message = "chromium is not installed (apt install chromium; infra/images/install_host_runtimes.sh)"
        if os.environ.get("POLAR_TEST_REQUIRE_RUNTIMES"):
            pytest.fail(message)
        pytest.skip(message)
    with Browser(CHROMIUM) as b:
        yield b


def hash_of(*parts: str) -> str:
    from urllib.parse import quote

    return "#" + "/".join(quote(p, safe="") for p in parts)


def pixels(image: np.ndarray, box: dict, colour: str, tolerance: int = 2) -> int:
    """How many pixels of ``colour`` lie in the page box ``box`` (CSS px = screenshot px)."""
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    x0, y0 = max(int(box["x"]), 0), max(int(box["y"]), 0)
    x1, y1 = int(box["x"] + box["width"]), int(box["y"] + box["height"])
    region = image[y0:y1, x0:x1, :3].astype(int)
    return int((np.abs(region - rgb) <= tolerance).all(axis=-1).sum())


def test_the_viewer_shows_a_merged_session(browser, stack, client, demo_task, tmp_path):
    from PIL import Image

    demo_task.update(num_samples=1, builder={"strategy": "prefix_merging"})
    demo_task["agent"]["model_name"] = "viewer-policy"
    task_id = client.submit(demo_task)
    status = client.wait(task_id, timeout=180, poll_seconds=0.3)
    [result] = status.results
    assert result.status == SessionStatus.COMPLETED and result.reward == 1.0, result.error
    [trace] = result.trajectory.traces
    sid = result.session_id
    api = stack.settings.api_url

    b = browser
    b.navigate(f"{api}/viewer/")
    b.wait("document.body.dataset.ready === 'login'")
    assert b.evaluate("fetch('/viewer/api/tasks').then(r => r.status)") == 401  # nothing without logging in
    b.evaluate("document.getElementById('token').value = 'not-the-token';"
               "document.getElementById('login-form').requestSubmit()")
    b.wait("document.getElementById('login-error').textContent === 'Wrong token.'")
    token = json.dumps(stack.settings.secret("api_token"))
    b.evaluate(f"document.getElementById('token').value = {token}; document.getElementById('login-form').requestSubmit()")
    b.wait("document.body.dataset.ready === '#'")
    assert b.evaluate("document.cookie") == ""  # HttpOnly, and scoped to /viewer/api
    assert token.strip('"') not in b.evaluate("location.href + document.body.innerHTML")

    b.evaluate(f"[...document.querySelectorAll('a.task-link')].find(a => a.textContent === {json.dumps(task_id)}).click()")
    b.wait(f"document.body.dataset.ready === {json.dumps(hash_of('task', task_id))}")
    b.evaluate(f"[...document.querySelectorAll('a.session-link')].find(a => a.textContent === {json.dumps(sid)}).click()")
    b.wait(f"document.body.dataset.ready === {json.dumps(hash_of('session', sid))}")
    b.evaluate("document.querySelector('button.trace-button[data-trace=\"0\"]').click()")
    b.wait(f"document.body.dataset.ready === {json.dumps(hash_of('session', sid, 'trace', '0'))}")

    dom = b.evaluate("""(() => {
      const q = (s) => document.querySelectorAll(s);
      return {title: document.title, images: q('img').length, scripts: q('script').length,
              response: document.getElementById('response').textContent,
              reward: document.getElementById('reward').textContent, status: document.getElementById('status').textContent,
              trainable: q('#response .tok.train').length, heat: [...new Set([...q('#response .tok.train')].map(
                t => [...t.classList].find(c => /^h[0-9]$/.test(c))))].sort(),
              driftTurns: [...q('.segment.turn .badge.drift')].map(b => b.closest('.segment').dataset.turn),
              toolcalls: q('#response .toolcall').length, interstitials: q('#response .segment.interstitial').length,
              maskedBlocks: q('#response .masked-block').length,
              stages: [...q('#lane-stages .bar')].map(b => b.textContent), calls: q('#lane-calls .call').length};
    })()""")
    # Untrusted text is shown as text: the payload is on the page, and nothing of it ran or parsed.
    assert "<script>document.title='pwned-script'</script>" in dom["response"] and "onerror=" in dom["response"]
    assert '<img src=x onerror="document.title=1">' in dom["response"]  # the tool's output, in an interstitial
    assert dom["title"] == "polar-rollout trajectories" and dom["images"] == 0 and dom["scripts"] == 1
    assert (dom["reward"], dom["status"]) == ("1.000", "COMPLETED")
    assert dom["trainable"] == trace.trainable_tokens
    assert dom["driftTurns"] == ["2"] and dom["toolcalls"] == 2 and dom["interstitials"] == 2
    assert dom["maskedBlocks"] == 2  # the interstitials' text, from the engine's /detokenize
    assert dom["stages"] == ["QUEUE", "INIT", "READY", "RUN", "POSTRUN", "EVALUATE", "CALLBACK"]
    assert dom["calls"] == 3 and len(dom["heat"]) >= 1
    assert not b.exceptions, b.exceptions
    assert not [m for m in b.messages if "Content Security Policy" in m], b.messages

    shot = Path(os.environ.get("POLAR_TEST_VIEWER_SCREENSHOT") or tmp_path / "viewer.png")
    b.screenshot(shot)
    print(f"viewer screenshot: {shot}")
    boxes = b.evaluate("""(() => {
      const box = (e) => { const r = e.getBoundingClientRect(); return {x: r.x + scrollX, y: r.y + scrollY,
                                                                           width: r.width, height: r.height}; };
      return {response: box(document.getElementById('response')), legend: box(document.getElementById('legend')),
              drift: box(document.querySelector('.segment.turn .badge.drift')),
              stages: box(document.getElementById('lane-stages')), calls: box(document.getElementById('lane-calls'))};
    })()""")
    image = np.asarray(Image.open(shot).convert("RGB"))
    response = {name: pixels(image, boxes["response"], COLOURS[name])
                for name in ("trainable", "masked", "tool", "interstitial", *HEAT)}
    assert response["trainable"] > 200 and response["masked"] > 200, response
    assert response["tool"] > 100 and response["interstitial"] > 100, response
    assert [h for h in HEAT if response[h] > 30] == dom["heat"], response  # each shade the tokens use, and only those
    assert all(pixels(image, boxes["legend"], COLOURS[h]) > 30 for h in HEAT)
    drift = boxes["drift"]
    assert pixels(image, drift, COLOURS["drift"]) > 0.4 * drift["width"] * drift["height"]
    for stage in dom["stages"]:
        assert pixels(image, boxes["stages"], COLOURS[stage]) >= 20, stage
    assert pixels(image, boxes["calls"], COLOURS["call"]) >= 3 * 3 * 16
