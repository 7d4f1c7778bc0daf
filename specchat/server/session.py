"""A conversation with a running llama-server: messages in, the same events as a local turn out.

The conversation is rendered with the server's own chat template and tokenized by the server,
so the context policy (chat/context.py) leaves turns out exactly as it does for a local model,
and the prompt goes to the server as token ids. The server's prompt cache then evaluates only
what is new since the last turn, as the local KV rule does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

from specchat.chat import context
from specchat.chat.session import Conversation, typed_prompt
from specchat.engine.baseline import TypedAhead
from specchat.engine.events import ContextEvent, Event, StopReason, TurnEvent
from specchat.engine.loop import GenerationSettings
from specchat.engine.sampling import SamplingParams
from specchat.engine.types import FittedPrompt
from specchat.server.client import ServerClient, ServerError, ServerModels
from specchat.server.verdicts import ServerReply

DEFAULT_CTX = 4096
"""The context the policy assumes when the server does not say its own."""


class ServerSession:
    def __init__(self, client: ServerClient, sampling: SamplingParams,
                 conversation: Conversation | None = None,
                 context_policy: str = "rolling", baseline: ServerClient | None = None,
                 cache_prompt: bool = True) -> None:
        """`baseline`: a second server with the same target and no draft, which each reply's
        speedup is measured against (a llama-server cannot answer without its speculation).
        `cache_prompt` False: the server evaluates every prompt whole, as the bench's local
        arms do from empty caches."""
        self.client, self.baseline_client = client, baseline
        self.cache_prompt = cache_prompt
        self.models: ServerModels = client.models()
        self.sampling = sampling
        self.conversation = conversation or Conversation()
        self.context_policy = context_policy
        self.typed_ahead = TypedAhead()
        """The server's reads of the next message's prompt while it was typed."""
        self._read: list[int] = []

    @classmethod
    def connect(cls, url: str, baseline_url: str | None, sampling: SamplingParams,
                conversation: Conversation | None = None, context_policy: str = "rolling",
                cache_prompt: bool = True) -> ServerSession:
        """A session on the server at `url` (asked what it runs), with the baseline server at
        `baseline_url` where one is given."""
        return cls(ServerClient(url), sampling, conversation, context_policy,
                   ServerClient(baseline_url) if baseline_url else None, cache_prompt)

    @property
    def draft_name(self) -> str:
        """The server's speculation as the stats name a drafter: its methods, or none."""
        return f"server: {self.models.speculation}" if self.models.speculation else "none"

    def names(self) -> tuple[str, str]:
        """(target, draft) as the history keeps them: the server and its models."""
        return f"{self.client.url} {self.models.target}", self.draft_name

    @property
    def where(self) -> str:
        """Where the reply comes from, in one line (the status line, `chat`, `ask`)."""
        return (f"llama-server {self.client.url} · target {self.models.target} · "
                f"draft {self.draft_name}")

    def render(self, messages: Sequence[tuple[str, str]]) -> list[int]:
        return self.client.tokenize(self.client.render_chat(list(messages)))

    def prompt(self, user_text: str, max_tokens: int) -> FittedPrompt:
        conv = self.conversation
        return context.first_prompt(self.render, conv.system, conv.messages, user_text,
                                    n_ctx=self.models.n_ctx or DEFAULT_CTX,
                                    policy=self.context_policy, max_tokens=max_tokens)

    def read_ahead(self, typed: str, max_tokens: int) -> int:
        """While the user types: the server reads the prompt a reply to `typed` would start
        with into its prompt cache (`chat.session.typed_prompt`), so that Enter leaves it only
        the rest, as the local models do. Returns the tokens it evaluated (0 without a prompt
        cache, or with nothing new to read)."""
        if not self.cache_prompt:
            return 0
        ids = typed_prompt(lambda text: self.prompt(text, max_tokens).prompt_ids, typed)
        if not ids or ids == self._read:
            return 0
        n, seconds = self.client.read(ids)
        self.typed_ahead.add(len(ids), n, seconds)
        self._read = ids
        return n

    def request(self, prompt_ids: list[int], settings: GenerationSettings) -> dict:
        """The /completion body: the prompt as token ids, the sampling as the local engine's."""
        s = self.sampling
        # min_p 0: the server's default (0.05) is a transform the local engine does not make
        body = {"prompt": prompt_ids, "n_predict": settings.max_tokens,
                "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": 0.0,
                "stop": list(settings.stop), "timings_per_token": True, "return_tokens": True,
                "cache_prompt": self.cache_prompt}
        if s.seed is not None:
            body["seed"] = s.seed
        return body

    def turn(self, user_text: str, settings: GenerationSettings | None = None,
             cancel: threading.Event | None = None) -> Iterator[Event]:
        """One reply from the server; the user message and the reply (a stopped one too) join
        the conversation when it ends, as in a local session."""
        settings = settings or GenerationSettings()
        fitted = self.prompt(user_text, settings.max_tokens)
        if fitted.left_out:
            yield ContextEvent(fitted.left_out, len(fitted.prompt_ids))
        for event in self.generate(fitted.prompt_ids, settings, cancel):
            if isinstance(event, TurnEvent):
                self.conversation.messages += [("user", user_text), ("assistant", event.text)]
            yield event

    def generate(self, prompt_ids: list[int], settings: GenerationSettings,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """The server's reply to a prompt of token ids, as the engine's `generate` gives one:
        its tokens and rounds, then the turn with its speedup where a baseline server is set."""
        reply = ServerReply(self.draft_name)
        chunks = self.client.stream(self.request(prompt_ids, settings))
        try:
            yield from reply.events(chunks, cancel)
        finally:
            chunks.close()
        # the reads while typing that the prompt kept: within what the server found cached
        cached = reply.final.get("cache_n", 0) if reply.final else 0
        typed, self.typed_ahead, self._read = self.typed_ahead.kept(int(cached)), TypedAhead(), []
        baseline = None
        if settings.baseline_steps and reply.stop_reason != StopReason.CANCELLED and reply.stats.drafted:
            baseline = self.baseline(prompt_ids, reply.text, len(reply.token_ids),
                                     settings.baseline_steps)
        yield reply.turn(prompt_ids, baseline, typed)

    def baseline(self, prompt_ids: list[int], reply: str, n_reply: int, steps: int
                 ) -> tuple[float, str]:
        """The target-only rate where the reply ended, measured as the reply was: the baseline
        server continues it (prompt and reply) for `steps` tokens after its first, streamed,
        and the rate is tokens over the time between their arrivals on this side. The tokens
        are not kept. Without a baseline server it is not measured: the speculating server
        cannot answer without its draft, and even a one-token request there feeds the draft
        model too (docs/server.md measures it)."""
        if self.baseline_client is None:
            return 0.0, ("not measured (give --baseline-server: a llama-server with the same "
                         "target and no draft)")
        prompt: list[int | str] = [*prompt_ids, reply] if reply else list(prompt_ids)
        arrived: list[tuple[int, float]] = []  # (tokens generated so far, when they arrived)
        try:
            # past an end of generation too, as the local engine's baseline steps go on
            for chunk in self.baseline_client.stream({"prompt": prompt, "n_predict": steps + 1,
                                                      "temperature": 0.0, "ignore_eos": True,
                                                      "cache_prompt": True}):
                if chunk.tokens:
                    arrived.append((chunk.tokens_predicted, time.perf_counter()))
        except ServerError as exc:  # the reply stands; only its speedup is missing
            return 0.0, f"not measured ({exc})"
        if len(arrived) < 2:
            return 0.0, "not measured (the baseline server ended the continuation at once)"
        (n0, t0), (n1, t1) = arrived[0], arrived[-1]
        return ((n1 - n0) / (t1 - t0), f"{n1 - n0} target-only steps on "
                f"{self.baseline_client.url} at depth {len(prompt_ids) + n_reply}")
