"""The commands end to end, one module per command as in ``exporter/cli/``: ``bench``, ``capacity``,
``demo``, ``run`` and ``sim``. ``profile`` is tested beside its job (``tests/jobs/test_prefill_profile.py``)
and ``check-config`` beside the config files it checks (``tests/settings/test_check_config.py``)."""
