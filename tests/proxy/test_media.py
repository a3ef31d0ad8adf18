"""An image sent to a text-only engine is refused, as vLLM refuses it, and the caller gets that as
its own API's 400, through its own SDK; the call is recorded as a failed call, not as a completion
whose prompt silently lacks the image. The same request without the image is answered."""

from __future__ import annotations

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gt

from tests.support import error_shape, records, running_session

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
ASK = "What is in this picture?"


def chat(base: str, key: str, image: bool) -> None:
    parts = [{"type": "text", "text": ASK}]
    if image:
        parts.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}})
    openai.OpenAI(base_url=f"{base}/s/{key}/v1", api_key=key, max_retries=0).chat.completions.create(
        model="tiny", max_tokens=4, messages=[{"role": "user", "content": parts}])


def responses(base: str, key: str, image: bool) -> None:
    parts = [{"type": "input_text", "text": ASK}]
    if image:
        parts.append({"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"})
    openai.OpenAI(base_url=f"{base}/s/{key}/v1", api_key=key, max_retries=0).responses.create(
        model="tiny", max_output_tokens=4, input=[{"role": "user", "content": parts}])


def messages(base: str, key: str, image: bool) -> None:
    parts = [{"type": "text", "text": ASK}]
    if image:
        parts.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}})
    anthropic.Anthropic(base_url=f"{base}/s/{key}", api_key=key, max_retries=0).messages.create(
        model="tiny", max_tokens=4, messages=[{"role": "user", "content": parts}])


def google(base: str, key: str, image: bool) -> None:
    parts = [gt.Part(text=ASK)]
    if image:
        parts.append(gt.Part.from_bytes(data=__import__("base64").b64decode(PNG), mime_type="image/png"))
    client = genai.Client(api_key=key, http_options=gt.HttpOptions(  # (kept: a dropped client closes itself)
        base_url=f"{base}/s/{key}", retry_options=gt.HttpRetryOptions(attempts=1)))
    client.models.generate_content(
        model="tiny", contents=[gt.Content(role="user", parts=parts)],
        config=gt.GenerateContentConfig(max_output_tokens=4))


CALLERS = {"chat": chat, "responses": responses, "anthropic": messages, "google": google}
REFUSED = (openai.BadRequestError, anthropic.BadRequestError, genai_errors.ClientError)


@pytest.mark.parametrize("kind", list(CALLERS))
def test_an_image_for_a_text_only_engine_is_the_callers_400(ref_stack, kind):
    base, url = ref_stack.settings.proxy_url, ref_stack.settings.redis_url
    key = running_session(url)
    with pytest.raises(REFUSED) as info:
        CALLERS[kind](base, key, image=True)
    response = info.value.response
    assert response.status_code == 400
    body = response.json()
    assert error_shape(kind, body)
    assert "not a multimodal model" in str(body) and "image_url" in str(body)
    done, failed = records(url, key)
    assert not done and len(failed) == 1

    CALLERS[kind](base, key, image=False)  # the session goes on: the text alone is answered
    done, _ = records(url, key)
    assert len(done) == 1
