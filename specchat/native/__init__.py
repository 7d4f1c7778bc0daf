"""llama.cpp's native side as specchat handles it: llama_tools.py unpacks the pinned sdist,
applies patches/llama.cpp and builds llama.cpp's tools from it (and marks the wheel built so);
model_thread.py is the one thread every llama.cpp call runs on."""
