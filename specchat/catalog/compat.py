"""Can this draft model draft for that target? llama.cpp's rule, with the reason spelled out.

The rule (common/speculative.cpp): same vocabulary type, same BOS/EOS handling, vocabulary sizes
within 128, and identical token text from id 5 upward. Before it, specchat's own: neither model
may be recurrent or hybrid (their memory cannot drop a rejected draft's tokens). Read from GGUF headers only, so a menu
can judge every model on disk without loading any weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from specchat.catalog.gguf_file import GGUFInfo, read_gguf

MAX_VOCAB_SIZE_DIFFERENCE = 128
RECURRENT_ARCHITECTURES = frozenset({
    # llm_arch_is_recurrent / llm_arch_is_hybrid in the vendored llama.cpp: their memory keeps
    # a state that cannot drop the rejected tail of a draft
    "mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "jamba", "falcon-h1", "plamo2",
    "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe", "qwen3next",
    "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01",
})
CHECK_FROM_TOKEN = 5
_ADD_BOS_DEFAULT = {"llama": True, "gpt2": False}


@dataclass(frozen=True)
class Compatibility:
    ok: bool
    reason: str
    rule: str
    """Which rule decided: memory, vocab_type, special_tokens, vocab_size, token_text, or ok."""

    @property
    def as_text(self) -> bool:
        """Refused only for another vocabulary of the same type: such a draft can still draft
        as text (engine/text_drafter.py)."""
        return not self.ok and self.rule in AS_TEXT_RULES

    @property
    def drafting(self) -> str:
        """How the draft would draft, in words (the menus)."""
        return f"another vocabulary: drafted as text ({self.reason})" if self.as_text else \
            self.reason


AS_TEXT_RULES = frozenset({"vocab_size", "token_text", "special_tokens"})
"""Another vocabulary type (SentencePiece against BPE) is still refused: its text round trip
differs (leading spaces) and a tokenizer without byte fallback can abort llama.cpp."""


def _specials(info: GGUFInfo) -> dict[str, object]:
    model = info.get("tokenizer.ggml.model")
    return {
        "add_bos": bool(info.get("tokenizer.ggml.add_bos_token", _ADD_BOS_DEFAULT.get(model, False))),
        "add_eos": bool(info.get("tokenizer.ggml.add_eos_token", False)),
        "bos": info.get("tokenizer.ggml.bos_token_id"),
        "eos": info.get("tokenizer.ggml.eos_token_id"),
    }


def check_infos(target: GGUFInfo, draft: GGUFInfo) -> Compatibility:
    for role, info in (("target", target), ("draft", draft)):
        if info.architecture in RECURRENT_ARCHITECTURES:
            return Compatibility(
                False, f"the {role} is a {info.architecture} model: its recurrent memory cannot "
                       "drop rejected draft tokens", "memory",
            )
    t_type, d_type = target.get("tokenizer.ggml.model"), draft.get("tokenizer.ggml.model")
    if t_type != d_type:
        return Compatibility(
            False, f"vocabulary types differ: target uses {t_type!r}, draft uses {d_type!r}",
            "vocab_type",
        )
    t_sp, d_sp = _specials(target), _specials(draft)
    diffs = [f"{k} {t_sp[k]!r} vs {d_sp[k]!r}" for k in t_sp if t_sp[k] != d_sp[k]]
    if diffs:
        return Compatibility(
            False, "special tokens differ (target vs draft): " + ", ".join(diffs), "special_tokens"
        )
    n_t, n_d = len(target.tokens), len(draft.tokens)
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        return Compatibility(
            False,
            f"vocabulary sizes differ by {abs(n_t - n_d)} (target {n_t}, draft {n_d}; "
            f"at most {MAX_VOCAB_SIZE_DIFFERENCE} allowed)",
            "vocab_size",
        )
    for i in range(CHECK_FROM_TOKEN, min(n_t, n_d)):
        if target.tokens[i] != draft.tokens[i]:
            return Compatibility(
                False,
                f"token {i} differs: target {target.tokens[i]!r}, draft {draft.tokens[i]!r}",
                "token_text",
            )
    return Compatibility(True, f"same {t_type} vocabulary ({n_t} tokens)", "ok")


@lru_cache(maxsize=32)
def _cached_info(path: Path, mtime_ns: int, size: int) -> GGUFInfo:
    return read_gguf(path)


def header(path: str | Path) -> GGUFInfo:
    """The GGUF header of `path`, parsed once per file version."""
    p = Path(path)
    try:
        p = p.resolve()
        st = p.stat() if p.is_file() else None
    except (OSError, ValueError, RuntimeError):
        st = None  # read_gguf says what is wrong with it
    return _cached_info(p, st.st_mtime_ns, st.st_size) if st else read_gguf(p)


def check(target: str | Path, draft: str | Path) -> Compatibility:
    return check_infos(header(target), header(draft))


def check_loaded(target, draft) -> Compatibility:
    """The same rule on two loaded backends, for models without a GGUF header (checkpoint
    folders): vocabulary sizes within 128, the same end-of-generation tokens, and the same
    bytes for every token from id 5 up."""
    n_t, n_d = target.n_vocab, draft.n_vocab
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        return Compatibility(
            False, f"vocabulary sizes differ by {abs(n_t - n_d)} (target {n_t}, draft {n_d}; "
                   f"at most {MAX_VOCAB_SIZE_DIFFERENCE} allowed)", "vocab_size")
    for i in range(CHECK_FROM_TOKEN, min(n_t, n_d)):
        if target.token_bytes(i) != draft.token_bytes(i):
            return Compatibility(
                False, f"token {i} differs: target {target.token_bytes(i)!r}, draft "
                       f"{draft.token_bytes(i)!r}", "token_text")
    eog_t = {i for i in range(min(n_t, n_d)) if target.is_eog(i)}
    eog_d = {i for i in range(min(n_t, n_d)) if draft.is_eog(i)}
    if eog_t != eog_d:
        return Compatibility(False, f"end-of-generation tokens differ: target {sorted(eog_t)}, "
                                    f"draft {sorted(eog_d)}", "special_tokens")
    return Compatibility(True, f"same vocabulary ({n_t} tokens)", "ok")
