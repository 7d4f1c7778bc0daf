"""Model backends: one model each behind the interface the engine defines in
`specchat.engine.backend.Backend` (llama.cpp, llama.cpp in a child process for RPC servers,
transformers)."""
