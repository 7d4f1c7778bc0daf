"""A real llama-server (llama.cpp's own, built from the same vendored source as the
llama-cpp-python in use) on the tiny pair, speculating with the tiny draft."""

from __future__ import annotations

import pytest
from support.checks import missing
from support.processes import LlamaServer, llama_server_binary


@pytest.fixture(scope="session")
def server_binary():
    return llama_server_binary() or missing("llama-server",
                                            "python -m benchmarks.tools llama-server")


@pytest.fixture(scope="module")
def plain_server(server_binary, tiny, tmp_path_factory):
    """The same target alone: the baseline a speculating server cannot give itself."""
    server = LlamaServer(server_binary, tiny.target,
                         log=tmp_path_factory.mktemp("server") / "llama-server-plain.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def spec_server(server_binary, tiny, tmp_path_factory):
    server = LlamaServer(server_binary, tiny.target, tiny.draft,
                         log=tmp_path_factory.mktemp("server") / "llama-server.log")
    yield server
    server.stop()
