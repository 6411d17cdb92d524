"""Reports of a one-shot evaluation: the figures (pure), the files a person reads, and the plots.

``summary`` turns measured results into the report's figures (pure); ``evaluation_options`` builds what a
run evaluates from its evaluation flags; ``bench_report`` writes a bench run's report (``files``, and ``plots``
with the ``plots`` extra); ``table`` is the text a person reads at the end; ``capacity_plot`` the
capacity search's headroom plot.
"""
