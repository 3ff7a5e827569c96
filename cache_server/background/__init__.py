"""Work a server process does beside its requests: every few seconds (:mod:`.periodic`: the batched access
counters of :mod:`.access` written, budget eviction), and only at quiet moments (:mod:`.activity`: how busy
the process is, which background graph parsing waits on)."""
