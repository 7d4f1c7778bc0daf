"""The Textual app: chat with the live speculation visualiser."""
