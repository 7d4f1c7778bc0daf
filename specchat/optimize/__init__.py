"""`specchat models optimize`: a model re-laid for this CPU's kernels, beside the original,
measured against it. command.py runs it; stages.py is the pipeline of rewrites (quantize.py,
block_scales.py, hot_vocab.py, fused_qkv.py), measure.py times both files, quality.py
measures what a target gives up."""
