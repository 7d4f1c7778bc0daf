"""`specchat lesson`: a guided lesson on speculative decoding, each step a live demonstration
on the loaded pair, a llama-server's, or the shipped traces (no UI in it: the app's lesson
screen and `specchat lesson --export` draw what it makes)."""
