"""Reports of a one-shot evaluation: the figures (pure), the files a person reads, and the plots."""
