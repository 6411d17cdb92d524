"""What tests in more than one package share: a running simulator (``sim``), a served daemon and its
samples (``daemon``), bounded waiting (``wait``), loopback servers and ports (``net``), the exit code of
a measured command (``measured``), and the real Prometheus stack with its stand-in gateway
(``prometheus``, ``gateway``). Fixtures built on them are in ``tests/conftest.py``; helpers used by one
package stay in that package."""
