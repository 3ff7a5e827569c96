"""The local cache directory: its files and verified writes, the last warm's record (``cachedir.py``), and
the locks that keep one warm and one uploader per directory at a time (``dirlock.py``)."""
