"""Moving entries between the server and the cache directory: a warm's conversation with the server
(``conversation.py``) over what it planned (``plan.py``), downloads and bundles (``download.py``,
``bundle.py``), uploads and the background uploader (``upload.py``, ``uploader.py``), the follower that
fetches what other jobs store while a job runs (``follower.py``), which entries trusted keys signed
(``trust.py``), the nearest populated namespaces when a warm finds few entries (``nearest.py``) and
progress bars (``progress.py``)."""
