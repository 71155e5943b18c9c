"""The embedded server of the command line: SecantusDB as a subprocess (``server``), kept
running between commands (``background``), with its data directory private to its user
(``datadir``). Optional: ``pip install 'aecs-mongo[embedded]'``.
"""
