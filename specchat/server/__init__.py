"""specchat as a client of llama.cpp's own server: its replies as the same event stream as a
local turn, every verdict from the server's own counters."""
