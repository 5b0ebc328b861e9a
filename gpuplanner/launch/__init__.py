"""Running jobs: hosts and host keys, local and SSH backends behind one interface, payload upload,
telemetry streaming with resume, stop/kill, the auto-resume supervisor and multi-node launches. No Qt.

The UI and the CLI use :class:`gpuplanner.launch.manager.RunManager` and the host functions of
:mod:`gpuplanner.launch.hosts`.
"""
