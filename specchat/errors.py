"""Errors a user can act on: the CLI prints them as one line and exits 2, without a traceback."""


class SpecchatError(Exception):
    """A problem with the user's input or environment, with a message that says what to do.
    The message is one line: a line break in it (from a file name, say) is shown as \\n."""

    def __init__(self, message: str = "", *args: object) -> None:
        super().__init__(str(message).replace("\r", "\\r").replace("\n", "\\n"), *args)


class ModelFileError(SpecchatError):
    """A model file is missing, is not a GGUF, is truncated, or llama.cpp cannot load it."""


class ModelNotInstalledError(ModelFileError):
    """A catalog model was asked for but is not in any models folder yet."""


class IncompatibleDraftError(SpecchatError):
    """The draft model cannot draft for the target (vocabularies differ)."""


class ContextOverflowError(SpecchatError):
    """The prompt does not fit in the model's context window."""


class CacheTruncationError(SpecchatError):
    """The model's memory cannot drop part of a sequence (e.g. a recurrent model)."""

    REASON = ("this model's memory cannot drop part of a sequence (recurrent or hybrid "
              "architecture), so it cannot take part in speculation; use --draft none")

    def __init__(self, model: str) -> None:
        super().__init__(f"{model}: {self.REASON}")


class DecodeError(SpecchatError):
    """llama.cpp refused a batch (out of memory, KV cache full); the cache is left as it was."""
