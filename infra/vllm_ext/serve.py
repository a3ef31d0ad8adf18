"""``python -m infra.vllm_ext.serve <vllm serve args>``: vLLM's OpenAI API server plus the token-in
chat route. Same arguments as ``python -m vllm.entrypoints.openai.api_server``; one API server
process only (``--api-server-count`` > 1 starts workers that do not carry the route).
NOT run against a real vLLM here: see README.md."""

from __future__ import annotations

import asyncio
import sys


def main(argv: list[str] | None = None) -> None:
    from vllm.entrypoints.openai import api_server
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args

    try:
        from vllm.utils import FlexibleArgumentParser
    except ImportError:  # later vLLM
        from vllm.utils.argparse_utils import FlexibleArgumentParser

    from infra.vllm_ext.serving import router
    from infra.vllm_ext.token_in import install_route

    setup = getattr(api_server, "cli_env_setup", None)
    if setup is not None:
        setup()
    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-compatible server + token-in chat"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    validate_parsed_serve_args(args)
    if getattr(args, "api_server_count", 1) not in (None, 1):
        raise SystemExit("infra.vllm_ext.serve runs one API server process (--api-server-count 1)")
    install_route(api_server, router)
    try:
        import uvloop
    except ImportError:
        asyncio.run(api_server.run_server(args))
    else:
        uvloop.run(api_server.run_server(args))


if __name__ == "__main__":
    main()
