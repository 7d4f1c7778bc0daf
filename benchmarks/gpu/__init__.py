"""The GPU check's kit: check.sh runs it, prepare.sh bundles what it needs, probe/ tries every way
of loading a model, load.py is the one load both try, models.py writes the random-weight pairs."""
