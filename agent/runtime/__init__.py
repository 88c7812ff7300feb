"""What puts the layers below together: how a node's pipeline (:mod:`joulestat.pipeline`)
is assembled from settings, the daemon that runs it with its threads, embedded mode (the
same pipeline inside a user's process), and the settings themselves."""
