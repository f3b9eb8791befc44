"""A stateful Kubernetes API double served on loopback.

Run it with ``PYTHONPATH=lab python -m kubegpu_lab.apidouble --state-dir DIR`` (see
``__main__``), or from Python with ``control.ApiDoubleProcess``. ``docs/lab-apidouble.md``
describes what it implements and what it does not.
"""
