from pairkit.cli import entry

entry()
