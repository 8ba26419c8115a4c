"""Example Spark jobs on xshard streams (run them with `python -m pipeline.examples.<name>`)."""
