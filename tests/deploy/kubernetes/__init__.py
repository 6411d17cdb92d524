"""Tests of deploy/kubernetes/ and the Dockerfile: rendered manifests, pod commands run for real, shards."""
