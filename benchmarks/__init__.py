"""The experiments behind docs/: one-off measurements, each run from the repository root as
`python -m benchmarks.NAME --help`. They are not part of the package (the wheel leaves them
out) and the package never imports them; `specchat bench` and `specchat tune` are the product's
own measurements."""
