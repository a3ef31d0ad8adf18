"""The token-in chat route on a vLLM OpenAI server (needs vLLM; written for 0.10.2 - 0.11.x, with
the later module layout as a fallback). NOT run against a real vLLM here: see README.md.

``POST /v1/chat/completions/tokens``: a vLLM chat request plus ``prompt_token_ids``, answered by
the server's own ``OpenAIServingChat`` (a shallow copy whose class adds ``TokenInChatMixin``), so
the answer is exactly vLLM's chat completion, sampled after the given ids.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field, StrictInt

from infra.vllm_ext.token_in import TOKENS_ROUTE, error_status, refusal, token_in_serving

try:  # vLLM <= 0.11
    from vllm.entrypoints.openai.protocol import ChatCompletionRequest, ChatCompletionResponse, ErrorResponse
except ImportError:  # the later layout (chat_completion/, engine/)
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest, ChatCompletionResponse
    from vllm.entrypoints.openai.engine.protocol import ErrorResponse

try:
    from vllm.entrypoints.utils import load_aware_call, with_cancellation
except ImportError:
    try:
        from vllm.entrypoints.serve.utils.api_utils import load_aware_call, with_cancellation
    except ImportError:  # neither: the route works without cancellation on disconnect / load tracking
        def with_cancellation(f):  # type: ignore[no-redef]
            return f

        load_aware_call = with_cancellation  # type: ignore[assignment]


class TokenInChatCompletionRequest(ChatCompletionRequest):
    # StrictInt: pydantic would otherwise turn "12" or true into ids.
    prompt_token_ids: list[StrictInt] = Field(
        description="The prompt as token ids, sampled after instead of the rendered messages.")


router = APIRouter()


@router.post(TOKENS_ROUTE)
@with_cancellation
@load_aware_call
async def create_chat_completion_tokens(request: TokenInChatCompletionRequest, raw_request: Request):
    serving = token_in_serving(raw_request.app.state)
    if serving is None:
        return JSONResponse({"error": {"message": "The model does not support Chat Completions API",
                                       "type": "NotFoundError", "param": None, "code": 404}}, status_code=404)
    reason = refusal(serving)
    generator = (serving.create_error_response(reason) if reason else
                 await serving.create_chat_completion(request, raw_request))
    if isinstance(generator, ErrorResponse):
        return JSONResponse(content=generator.model_dump(), status_code=error_status(generator))
    if isinstance(generator, ChatCompletionResponse):
        return JSONResponse(content=generator.model_dump())
    return StreamingResponse(content=generator, media_type="text/event-stream")
