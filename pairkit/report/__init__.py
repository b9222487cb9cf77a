"""Static HTML views of pairkit's outputs: pair tables, dedup groups, eval results.

``pairkit report`` builds one folder (``index.html`` + ``t/`` thumbnails +
``plots/``) that opens from ``file://`` with no server and no network. Data is
embedded as JSON and drawn with DOM calls; see :mod:`pairkit.report.page`.
"""
