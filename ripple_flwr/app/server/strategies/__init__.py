"""The server's engine and shared machinery (:mod:`.core`); the methods are in
``ripple_flwr/methods/<name>/``, chosen by :mod:`ripple_flwr.methods.registry` alone."""
