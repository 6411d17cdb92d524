"""Developer scripts that are not part of the installed package (``python -m scripts.<name>``)."""
