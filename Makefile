# Only what is not a plain command: the bundle a GPU check carries to a machine with no network.
.PHONY: gpu-bundle
gpu-bundle:
	PYTHON=.venv/bin/python benchmarks/gpu/prepare.sh .gpu
