"""Reusable test machinery: process spawning, a raw RESP client, workload generators."""
